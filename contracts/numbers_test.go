package contracts

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/jsontape"
)

func TestNumberBounds(t *testing.T) {
	tests := []struct {
		name string
		lit  string
		in   bool
	}{
		{"a small integer", "20", true},
		{"zero", "0", true},
		{"negative zero", "-0", true},
		{"the smallest int64", "-9223372036854775808", true},
		{"the largest uint64", "18446744073709551615", true},
		{"the largest float64", "1.7976931348623157e308", true},
		{"the smallest float64", "5e-324", true},
		{"the largest float64 spelled out", strconv.FormatFloat(math.MaxFloat64, 'f', -1, 64), true},
		{"the smallest float64 spelled out", strconv.FormatFloat(5e-324, 'f', -1, 64), true},
		{"a fraction with trailing zeros", "1.500", true},
		{"a magnitude just below the bound", "9.99e399", true},
		{"a magnitude at the lower bound", "1e-400", true},
		{"the lower bound spelled out", "0." + strings.Repeat("0", 399) + "1", true},
		{"a hundred significant digits", "1" + strings.Repeat("2", 98) + "3e5", true},
		{"a zero with an exponent at the bound", "0e400", true},
		{"1e400", "1e400", false},
		{"1e400 spelled out", "1" + strings.Repeat("0", 400), false},
		{"1e999999", "1e999999", false},
		{"a magnitude below the lower bound", "1e-401", false},
		{"1e-999999", "1e-999999", false},
		{"a hundred and one significant digits", "1" + strings.Repeat("2", 99) + "3", false},
		{"a zero with a huge exponent", "0e99999999999999999999", false},
		{"a fraction padded past the length bound", "1." + strings.Repeat("0", 1000), false},
		{"leading zeros hidden by the exponent", "0." + strings.Repeat("0", 1000) + "1e1001", false},
		{"not a number", "1e", false},
		{"a leading zero", "01", false},
		{"nothing", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := numberInBounds(tt.lit); got != tt.in {
				t.Errorf("numberInBounds(%.60q) = %v, want %v", tt.lit, got, tt.in)
			}
		})
	}
}

func TestCanonicalNumberSpellsIntegersAsDigits(t *testing.T) {
	tests := []struct{ in, want string }{
		{"10", "10"},
		{"1e1", "10"},
		{"1E+2", "100"},
		{"10.0", "10"},
		{"12.3400e2", "1234"},
		{"1.50e1", "15"},
		{"-2e3", "-2000"},
		{"-0.0", "0"},
		{"0.000e5", "0"},
		{"1e20", "100000000000000000000"},
		{"9.99e399", "999" + strings.Repeat("0", 397)},
		{"1.5", "1.5"},
		{"-2.5e-3", "-2.5e-3"},
		{"1.25e1", "1.25e1"},
		{"1e400", "1e400"}, // beyond the bounds: validation refuses it first
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := canonicalNumber(json.Number(tt.in)); got != tt.want {
				t.Errorf("canonicalNumber(%s) = %.60s, want %.60s", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzNumberBounds checks the number reader against math/big: a number
// within the bounds has the value, the integrality and the magnitude
// big.Rat gives it, and its canonical spelling has the same value.
func FuzzNumberBounds(f *testing.F) {
	for _, s := range []string{"0", "-0.0", "1e1", "12.3400e2", "1e399", "1e400", "1e-400", "1e-401", "0.001", "-1.5E-3", "100", "0e5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 200 {
			return
		}
		shape, ok := parseNumber(s)
		if ok != jsontape.IsNumber(s) {
			t.Fatalf("parseNumber(%q) ok = %v", s, ok)
		}
		if !ok || !shape.inBounds() {
			return
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat cannot read %q", s)
		}
		canon := canonicalNumber(json.Number(s))
		c, ok := new(big.Rat).SetString(canon)
		if !ok || c.Cmp(r) != 0 {
			t.Fatalf("canonicalNumber(%q) = %q, another value", s, canon)
		}
		if integral := !strings.ContainsAny(canon, ".eE"); integral != r.IsInt() {
			t.Fatalf("canonicalNumber(%q) = %q, but big.Rat says integral=%v", s, canon, r.IsInt())
		}
		abs := new(big.Rat).Abs(r)
		if abs.Sign() == 0 {
			if shape.count != 0 {
				t.Fatalf("%q is zero, shape says %d digits", s, shape.count)
			}
			return
		}
		lo := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-min(shape.exp, 0))), nil))
		if shape.exp > 0 {
			lo.SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(shape.exp)), nil))
		}
		hi := new(big.Rat).Mul(lo, big.NewRat(10, 1))
		if abs.Cmp(lo) < 0 || abs.Cmp(hi) >= 0 {
			t.Fatalf("%q: exponent %d, but |x| = %s", s, shape.exp, abs.FloatString(5))
		}
	})
}

// bomb is the number bomb: a 9 KB request of integers that each
// take big.Rat a million-digit computation.
func bomb() []byte {
	return []byte(`{"ids":[` + strings.Repeat("1e999999,", 999) + `1e999999]}`)
}

// allocated runs fn and returns the bytes it allocated and how long it
// took.
func allocated(fn func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	fn()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

func TestNumberBombsAreRefusedBeforeTheSchemaLibrary(t *testing.T) {
	schema, err := CompileSchema(map[string]any{"type": "object", "properties": map[string]any{
		"ids": map[string]any{"type": "array", "maxItems": json.Number("10"), "items": map[string]any{"type": "integer"}},
		"x":   map[string]any{"type": "number"},
		"n":   map[string]any{"type": "integer"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	decoded := func() map[string]any {
		ids := make([]any, 1000)
		for i := range ids {
			ids[i] = json.Number("1e999999")
		}
		return map[string]any{"ids": ids}
	}
	tests := []struct {
		name    string
		args    func(t *testing.T) (map[string]any, error)
		pointer string
	}{
		{"a 9 KB request body of 1e999999", func(t *testing.T) (map[string]any, error) {
			args, err := DecodeArgs(bomb(), 32)
			if err != nil {
				t.Fatal(err)
			}
			return args, nil
		}, "/ids/0"},
		{"arguments handed over already decoded", func(*testing.T) (map[string]any, error) { return decoded(), nil }, "/ids/0"},
		{"a tiny number in a query value", func(*testing.T) (map[string]any, error) {
			v, err := schema.Coerce("x", []string{"1e-999999"})
			return map[string]any{"x": v}, err
		}, "/x"},
		{"a long integer in a query value", func(*testing.T) (map[string]any, error) {
			v, err := schema.Coerce("ids", []string{"1", strings.Repeat("7", 5000)})
			return map[string]any{"ids": v}, err
		}, "/ids/1"},
		{"1e400 for an integer", func(*testing.T) (map[string]any, error) {
			return map[string]any{"n": json.Number("1e400")}, nil
		}, "/n"},
		{"an infinite float handed over by an embedder", func(*testing.T) (map[string]any, error) {
			return map[string]any{"x": math.Inf(1)}, nil
		}, "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			bytes, took := allocated(func() {
				var args map[string]any
				if args, err = tt.args(t); err == nil {
					err = schema.Validate(args)
				}
			})
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Problem != ProblemNumber || ae.Pointer != tt.pointer {
				t.Fatalf("error = %v, want a number bound error at %s", err, tt.pointer)
			}
			if !strings.Contains(ae.text("en"), "Argument "+argName(tt.pointer)+" must be a number with at most 100 significant digits") {
				t.Errorf("message = %q", ae.text("en"))
			}
			// The library would allocate hundreds of megabytes and take
			// seconds; the bounds make it a few kilobytes.
			if bytes > 16<<20 || took > 2*time.Second {
				t.Errorf("refusing took %v and %d bytes", took, bytes)
			}
		})
	}
}

func TestIntegersAreForwardedAsPlainDigits(t *testing.T) {
	schema, err := CompileSchema(map[string]any{"type": "object", "properties": map[string]any{
		"n": map[string]any{"type": "integer"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := CompileBinding(nil, BindingSpec{Method: "POST", Path: "/items/{n}", Query: Fields(map[string]string{"q": "n"}), Body: Fields(map[string]string{"n": "n"})}, schema)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		n    any
		want string
	}{
		{"1e20 as written", json.Number("1e20"), "100000000000000000000"},
		{"9.99e399, the largest magnitude allowed", json.Number("9.99e399"), "999" + strings.Repeat("0", 397)},
		{"1e20 from an embedder's float64", float64(1e20), "100000000000000000000"},
		{"1e15 from an embedder's float64", float64(1e15), "1000000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{"n": tt.n}
			if err := schema.Validate(args); err != nil {
				t.Fatalf("%v is a valid integer: %v", tt.n, err)
			}
			bound, err := b.Bind(args)
			if err != nil {
				t.Fatal(err)
			}
			if bound.Path != "/items/"+tt.want || bound.Query != "q="+tt.want || string(bound.Body) != `{"n":`+tt.want+`}` {
				t.Errorf("bound %.80s ? %.80s body %.80s, want %.60s everywhere", bound.Path, bound.Query, bound.Body, tt.want)
			}
		})
	}
	for _, bad := range []float64{math.Inf(1), math.Inf(-1), math.NaN()} {
		t.Run("binding refuses "+strconv.FormatFloat(bad, 'g', -1, 64), func(t *testing.T) {
			if bound, err := b.Bind(map[string]any{"n": bad}); err == nil {
				t.Errorf("bound %+v", bound)
			}
		})
	}
}
