package jsontape

import (
	"math"
	"strconv"
)

// AppendFloat appends f as encoding/json writes a float64 (bits 64) or a
// float32 (bits 32): the shortest decimal that reads back as f, with an
// exponent only below 1e-6 or from 1e21 on, and a two-digit exponent
// written short (1e-7, not 1e-07).
//
// f must be finite. NaN and the infinities have no JSON spelling, and what
// stands for them is the caller's choice (the envelope writes a cost of 0,
// the fingerprint refuses them, a rule's data writes null).
func AppendFloat(dst []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(dst); n-start >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
