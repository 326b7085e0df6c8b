package proxy

import (
	"crypto/rand"
	"time"
)

// maxArgsDepth bounds nesting in arguments. Tool arguments are shallow; a
// deep document is an attack on the parser, not a call.
const maxArgsDepth = 32

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
