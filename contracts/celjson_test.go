package contracts

import (
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"

	"github.com/toolgate/toolgate/internal/jsontape"
)

func TestJSONViewsInCEL(t *testing.T) {
	tape, err := jsontape.Parse([]byte(`{"z":1,"results":[{"id":9007199254740993,"t":"a"},{"id":2}],"total":2,"ratio":0.5,"code":null,"k\u0065y":"v"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer tape.Release()
	m := celValue(tape.Root()).(*celJSONMap)
	if m.Size() != types.Int(6) {
		t.Errorf("size = %v", m.Size())
	}
	if v, ok := m.Find(types.String("key")); !ok || v != types.String("v") {
		t.Errorf("escaped key: %v %v", v, ok)
	}
	if _, ok := m.Find(types.String("missing")); ok {
		t.Error("found a missing key")
	}
	results := m.Get(types.String("results")).(*celJSONList)
	if results.Size() != types.Int(2) {
		t.Errorf("results size = %v", results.Size())
	}
	first := results.Get(types.Int(0)).(*celJSONMap)
	if id := first.Get(types.String("id")); id != types.Int(9007199254740993) {
		t.Errorf("big id = %v (precision lost?)", id)
	}
	if r := m.Get(types.String("ratio")); r != types.Double(0.5) {
		t.Errorf("ratio = %v", r)
	}
	var keys []string
	for it := m.Iterator(); it.HasNext() == types.True; {
		keys = append(keys, string(it.Next().(types.String)))
	}
	if strings.Join(keys, ",") != "z,results,total,ratio,code,key" {
		t.Errorf("keys = %v", keys)
	}
	if results.Get(types.Int(5)).Type() != types.ErrType {
		t.Error("index out of range did not fail")
	}
	if eq := first.Equal(types.DefaultTypeAdapter.NativeToValue(map[string]any{"id": 9007199254740993.0, "t": "a"})); eq != types.True {
		t.Errorf("equal = %v", eq)
	}
}

// TestViewOfAReleasedBodyPanics: a rule's view of an answer must not
// outlive the Body. Used after Release, once another answer has taken the
// pooled tape, it panics instead of reading that other call's answer.
func TestViewOfAReleasedBodyPanics(t *testing.T) {
	first, err := ParseBody([]byte(`{"secret":"first caller's"}`))
	if err != nil {
		t.Fatal(err)
	}
	view := celValue(first.tape.Root()).(*celJSONMap)
	first.Release()
	second, err := ParseBody([]byte(`{"secret":"second caller's"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	defer func() {
		if r := recover(); r != jsontape.ErrReleased {
			t.Fatalf("recovered %v, want jsontape.ErrReleased", r)
		}
	}()
	got := view.Get(types.String("secret"))
	t.Fatalf("a released view read %v", got)
}
