package learn

import (
	"maps"
	"math"
	"slices"
)

// absorb merges route src into dst, which has a placeholder at pos where
// src has a literal: src's requests all sent that literal there.
// Placeholders are matched by position, so names may differ.
func (l *Learner) absorb(dst, src *routeState, pos int) {
	rename := map[string]string{}
	for i, s := range src.segs {
		if s.wild && s.raw == "" && i < len(dst.segs) {
			rename[s.name] = dst.segs[i].name
		}
	}
	lit := unescape(src.segs[pos].literal)
	name := dst.segs[pos].name
	dst.Calls += src.Calls
	dst.Coded += src.Coded
	dst.Auth.merge(&src.Auth)
	for code, n := range src.Statuses {
		add(&dst.Statuses, code, n)
	}
	for reason, n := range src.Failures {
		add(&dst.Failures, reason, n)
	}
	for mt, n := range src.ContentTypes {
		addBounded(&dst.ContentTypes, mt, n)
	}
	dst.Latency.merge(src.Latency)
	for _, pair := range []struct{ dst, src *Request }{{&dst.Accepted, &src.Accepted}, {&dst.Rejected, &src.Rejected}} {
		l.mergeRequest(pair.dst, pair.src, rename)
		if pair.src.Count > 0 {
			addParam(&pair.dst.Path, name, valueType(lit), pair.src.Count)
		}
	}
	dst.Answer = l.mergeBody(&l.answers, dst.Answer, src.Answer)
	dst.Errors = l.mergeBody(&l.answers, dst.Errors, src.Errors)
	for _, k := range slices.Sorted(maps.Keys(src.ErrorCodes)) {
		s := src.ErrorCodes[k]
		d := entry(&dst.ErrorCodes, k, maxErrorFields)
		if d == nil {
			continue
		}
		d.Answers += s.Answers
		for code, n := range s.Statuses {
			add(&d.Statuses, code, n)
		}
		for t, n := range s.Types {
			add(&d.Types, t, n)
		}
		mergeValues(&d.Values, &d.ValuesDropped, s.Values, s.ValuesDropped, l.settings.MaxValues)
	}
	for _, sig := range slices.Sorted(maps.Keys(src.Shapes)) {
		if _, ok := dst.Shapes[sig]; ok || len(dst.Shapes) < l.settings.MaxShapes {
			add(&dst.Shapes, sig, src.Shapes[sig])
		} else {
			dst.OtherShapes += src.Shapes[sig]
		}
	}
	dst.OtherShapes += src.OtherShapes
	for _, h := range slices.Sorted(maps.Keys(src.Headers)) {
		s := src.Headers[h]
		d := entry(&dst.Headers, h, math.MaxInt)
		d.Seen += s.Seen
		d.MaxSeconds = max(d.MaxSeconds, s.MaxSeconds)
		for code, n := range s.Statuses {
			add(&d.Statuses, code, n)
		}
	}
}

// mergeRequest adds src's requests into dst; path placeholders are renamed
// by rename.
func (l *Learner) mergeRequest(dst, src *Request, rename map[string]string) {
	dst.Count += src.Count
	dst.IdempotencyKey += src.IdempotencyKey
	dst.OtherQuery += src.OtherQuery
	for _, name := range slices.Sorted(maps.Keys(src.Path)) {
		if to, ok := rename[name]; ok {
			mergeParam(&dst.Path, to, src.Path[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(src.Query)) {
		if dst.Query[name] == nil && len(dst.Query) >= l.settings.MaxKeys {
			dst.OtherQuery += src.Query[name].Seen
			continue
		}
		mergeParam(&dst.Query, name, src.Query[name])
	}
	for mt, n := range src.ContentTypes {
		addBounded(&dst.ContentTypes, mt, n)
	}
	dst.Body = l.mergeBody(&l.requests, dst.Body, src.Body)
}

func mergeParam(m *map[string]*Param, name string, p *Param) {
	for t, n := range p.Types {
		addParam(m, name, t, n)
	}
	if len(p.Types) == 0 && p.Seen > 0 {
		addParam(m, name, "string", p.Seen)
	}
}

// mergeBody merges body shape src into dst (either may be nil).
func (l *Learner) mergeBody(sh *shaper, dst, src *Shape) *Shape {
	if src == nil {
		return dst
	}
	if dst == nil {
		dst = &Shape{}
	}
	sh.mergeShape(dst, dst, src)
	return dst
}
