package learn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/policy"
)

// Open returns a learner that continues the summary in s.File, when the
// file exists; otherwise it starts an empty one. The file is read within
// the settings' bounds (read.go): routes beyond s.MaxRoutes (the fewest
// calls first) are counted as dropped, everything else beyond a bound is
// left out, and with EnumValues off no value is kept, so a summary never
// holds more than its current settings allow, and reading it never takes
// more memory than keeping it. A file larger than s.MaxFileBytes is not
// read: learning starts afresh, says so in a warning, and the next save
// replaces the file. A file that is not a summary is an error.
func Open(s policy.LearnSettings, opts Options) (*Learner, error) {
	l := New(s, opts)
	if s.File == "" {
		return l, nil
	}
	f, err := os.Open(s.File)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.File, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.File, err)
	}
	limit := l.settings.MaxFileBytes
	if st.Size() > limit {
		l.logger.Warn("the learning summary file is larger than max_file_bytes and was not read; learning starts afresh and the next save replaces it",
			"file", s.File, "bytes", st.Size(), "max_file_bytes", limit)
		return l, nil
	}
	sum, sr, err := l.read(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.File, err)
	}
	if sr.cut > 0 {
		l.logger.Info("the learning summary file held more than server.learn's bounds allow; continuing it cut to them",
			"file", s.File, "entries_cut", sr.cut, "routes_kept", len(sum.Routes), "calls_of_routes_cut", sr.dropped)
	}
	l.adopt(sum)
	return l, nil
}

// adopt makes sum the learner's summary, within its settings.
func (l *Learner) adopt(sum *Summary) {
	routes := sum.Routes
	sort.SliceStable(routes, func(i, j int) bool { return routes[i].Calls > routes[j].Calls })
	if len(routes) > l.settings.MaxRoutes {
		for _, r := range routes[l.settings.MaxRoutes:] {
			sum.Dropped += r.Calls
		}
		routes = routes[:l.settings.MaxRoutes]
	}
	sum.Routes = nil
	if sum.Upstreams == nil {
		sum.Upstreams = map[string]string{}
	}
	if !l.settings.EnumValues {
		sum.EnumValues = false
	}
	l.sum = *sum
	for _, r := range routes {
		clean(r)
		rs := &routeState{Route: r, segs: parseTemplate(r.Path)}
		for _, s := range []*Shape{r.Answer, r.Errors, r.Accepted.Body, r.Rejected.Body} {
			if s != nil {
				s.nodes = countNodes(s)
			}
		}
		if !l.settings.EnumValues {
			stripValues(r.Answer)
			stripValues(r.Errors)
			for _, cs := range r.ErrorCodes {
				cs.Values, cs.ValuesDropped = nil, true
			}
		}
		l.routes = append(l.routes, rs)
		if r.Tool != "" {
			l.toolIndex[toolKey{r.Upstream, r.Tool, r.Method, r.Path}] = rs
		}
	}
}

// ReadSummary reads a summary file written by Save, within the largest
// bounds server.learn accepts (policy.MaxLearnSettings), for reports.
func ReadSummary(path string) (*Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	limit := policy.MaxLearnSettings().MaxFileBytes
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	} else if st.Size() > limit {
		return nil, fmt.Errorf("reading %s: the file is larger than %d bytes", path, limit)
	}
	sum, _, err := New(policy.MaxLearnSettings(), Options{}).read(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sum, nil
}

// DecodeSummary decodes a summary as Save writes it, refusing unknown
// fields, another version and routes a policy could not hold, within the
// largest bounds server.learn accepts.
func DecodeSummary(data []byte) (*Summary, error) {
	sum, _, err := New(policy.MaxLearnSettings(), Options{}).read(bytes.NewReader(data))
	return sum, err
}

// clean drops the null entries a hand-edited file may hold, so every map
// value of a decoded route can be read.
func clean(r *Route) {
	for _, req := range []*Request{&r.Accepted, &r.Rejected} {
		deleteNil(req.Path)
		deleteNil(req.Query)
		cleanShape(req.Body)
	}
	cleanShape(r.Answer)
	cleanShape(r.Errors)
	deleteNil(r.ErrorCodes)
	deleteNil(r.Headers)
}

func cleanShape(s *Shape) {
	if s == nil {
		return
	}
	deleteNil(s.Fields)
	for _, c := range s.Fields {
		cleanShape(c)
	}
	cleanShape(s.Items)
}

func deleteNil[V any](m map[string]*V) {
	for k, v := range m {
		if v == nil {
			delete(m, k)
		}
	}
}

// Summary returns a copy of the summary, routes sorted by upstream, path
// and method.
func (l *Learner) Summary() *Summary {
	data, err := l.encode()
	if err != nil {
		// Only maps of strings and numbers are encoded; this cannot fail.
		panic(err)
	}
	var sum Summary
	if err := json.Unmarshal(data, &sum); err != nil {
		panic(err)
	}
	return &sum
}

// encode writes the summary as JSON, under the lock.
func (l *Learner) encode() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.routes, func(i, j int) bool {
		a, b := l.routes[i], l.routes[j]
		if a.Upstream != b.Upstream {
			return a.Upstream < b.Upstream
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Method != b.Method {
			return a.Method < b.Method
		}
		return a.Tool < b.Tool
	})
	sum := l.sum
	sum.Routes = make([]*Route, len(l.routes))
	for i, r := range l.routes {
		sum.Routes[i] = r.Route
	}
	return json.MarshalIndent(&sum, "", " ")
}

// Save writes the summary to the settings' file, atomically (a temporary
// file in the same directory, synced, then renamed), readable by its owner
// only. Without a file it does nothing.
func (l *Learner) Save() error {
	if l.settings.File == "" {
		return nil
	}
	data, err := l.encode()
	if err != nil {
		return err
	}
	return writeFileAtomic(l.settings.File, append(data, '\n'))
}

func writeFileAtomic(name string, data []byte) error {
	dir := filepath.Dir(name)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("saving the learning summary: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return fmt.Errorf("saving the learning summary: %w", err)
	}
	return nil
}

// String describes the summary in one line.
func (s *Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d exchanges on %d routes since %s", s.Exchanges, len(s.Routes), s.Since.Format("2006-01-02 15:04:05 MST"))
	if s.Dropped > 0 {
		fmt.Fprintf(&b, " (%d not learned: route limit or unbindable request)", s.Dropped)
	}
	return b.String()
}
