package proxy

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// maxArgsDepth bounds nesting in arguments. Tool arguments are shallow; a
// deep document is an attack on the parser, not a call.
const maxArgsDepth = 32

// parseArgs decodes a JSON object of arguments strictly: numbers stay
// json.Number (no precision is lost before the schema sees them), duplicate
// keys are refused (two readers could disagree on which one counts),
// invalid UTF-8 is refused, nesting is bounded, and nothing may follow the
// object.
func parseArgs(body []byte) (map[string]any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("the body is not valid JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("the body must be a JSON object")
	}
	obj, err := parseObject(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return obj, nil
}

func parseObject(dec *json.Decoder, depth int) (map[string]any, error) {
	obj := map[string]any{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, errors.New("the body is not valid JSON")
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			return obj, nil
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("the body is not valid JSON")
		}
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("the key %q appears twice", shortKey(key))
		}
		v, err := parseValue(dec, depth)
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("the body is not valid JSON")
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxArgsDepth {
		return nil, fmt.Errorf("the arguments are nested deeper than %d levels", maxArgsDepth)
	}
	switch d {
	case '{':
		return parseObject(dec, depth+1)
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, errors.New("the body is not valid JSON")
		}
		return arr, nil
	}
	return nil, errors.New("the body is not valid JSON")
}

func shortKey(k string) string {
	if len(k) > 40 {
		k = k[:40]
	}
	return k
}

// callID returns the request's id when it is a safe header value (it is
// echoed in the envelope and forwarded to the backend as X-Request-Id),
// otherwise a fresh ULID-shaped id.
func callID(given string) string {
	if given != "" && len(given) <= 128 {
		ok := true
		for i := 0; i < len(given); i++ {
			if given[i] < 0x21 || given[i] > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return given
		}
	}
	return newULID(time.Now())
}

// newULID makes a 26-character ULID: 48 bits of milliseconds, 80 random
// bits, Crockford base32. It sorts by time, which helps reading logs.
func newULID(now time.Time) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	var out [26]byte
	// 128 bits as 26 base32 digits, most significant first (the first
	// digit carries the top 3 bits).
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
