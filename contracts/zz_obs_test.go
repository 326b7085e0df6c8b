package contracts

import (
	"strconv"
	"testing"
)

func BenchmarkZZObs(b *testing.B) {
	m := Message{Text: "命中 300 条。", ActionAt: len("命中 300 条。")}
	opt := ObservationOptions{MaxChars: 1800, Lang: "zh", Hint: "请换更具体的关键词，或调小 limit"}
	for _, size := range []int{64 << 10, 1 << 20} {
		data := largeSearchData(size)
		b.Run(strconv.Itoa(size>>10)+"KiB/new", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				EnvelopeObservation(StatusOK, m, data, opt)
			}
		})
		b.Run(strconv.Itoa(size>>10)+"KiB/ref", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				refEnvelopeObservation(StatusOK, m, data, opt)
			}
		})
	}
}
