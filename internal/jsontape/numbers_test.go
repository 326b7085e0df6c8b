package jsontape

import (
	"encoding/json"
	"math"
	"testing"
)

func TestAppendFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		bits int
		want string
	}{
		{1.5, 64, "1.5"}, {100, 64, "100"}, {1e21, 64, "1e+21"}, {1e-7, 64, "1e-7"}, {1e-6, 64, "0.000001"},
		{math.Copysign(0, -1), 64, "-0"}, {0, 64, "0"}, {123456789e-20, 64, "1.23456789e-12"}, {float64(float32(0.1)), 32, "0.1"},
		{math.MaxFloat64, 64, "1.7976931348623157e+308"}, {5e-324, 64, "5e-324"},
	} {
		if got := string(AppendFloat([]byte("x"), tc.f, tc.bits)); got != "x"+tc.want {
			t.Errorf("AppendFloat(%v, %d) = %s, want x%s", tc.f, tc.bits, got, tc.want)
		}
	}
}

// FuzzAppendFloat: the float formatter writes what encoding/json writes,
// for float64 and float32.
func FuzzAppendFloat(f *testing.F) {
	for _, x := range []float64{0, 1, -1.5, 1e21, 1e20, 1e-6, 1e-7, 123.456e-300, math.SmallestNonzeroFloat64, math.MaxFloat32} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		want, _ := json.Marshal(x)
		if got := AppendFloat(nil, x, 64); string(got) != string(want) {
			t.Fatalf("AppendFloat(%v, 64) = %s, encoding/json %s", x, got, want)
		}
		x32 := float32(x)
		if math.IsInf(float64(x32), 0) {
			return
		}
		want, _ = json.Marshal(x32)
		if got := AppendFloat(nil, float64(x32), 32); string(got) != string(want) {
			t.Fatalf("AppendFloat(%v, 32) = %s, encoding/json %s", x32, got, want)
		}
	})
}
