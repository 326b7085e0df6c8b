package contracts

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"

	"github.com/toolgate/toolgate/examples"
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

// TestRulesReadEveryRecordOfALargeAnswer: rules that walk the records of
// a large answer (lazy in its tape, read whole once a walk passes its first
// record) read what encoding/json reads, whether they stop at the first
// record or go through them all.
func TestRulesReadEveryRecordOfALargeAnswer(t *testing.T) {
	answer := examples.PaddedSearchAnswer(64 << 10)
	renv, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := compileRules(renv, RulesSpec{Data: `{"titles": body.results.map(r, r.title),
		"zh": body.results.filter(r, r.id.startsWith("kb-2")).map(r, r.id),
		"first": body.results.exists(r, r.id == "kb-1001"), "last": body.results.exists(r, r.id == "kb-2010"),
		"urls": body.results.all(r, r.url.startsWith("https://")), "one": body.results.exists_one(r, r.id == "kb-1003")}`})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct{ ID, Title, URL string }
	}
	if err := json.Unmarshal(answer, &doc); err != nil {
		t.Fatal(err)
	}
	titles, zh, urls, ones := []any{}, []any{}, true, 0
	for _, r := range doc.Results {
		titles = append(titles, r.Title)
		if strings.HasPrefix(r.ID, "kb-2") {
			zh = append(zh, r.ID)
		}
		urls = urls && strings.HasPrefix(r.URL, "https://")
		if r.ID == "kb-1003" {
			ones++
		}
	}
	want := map[string]any{"titles": titles, "zh": zh, "first": true, "last": true, "urls": urls, "one": ones == 1}
	body, err := ParseBody(answer)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Release()
	data, _, _, err := rules.DataMembers(nil, &RuleInput{Status: 200, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the rules read\n%s\nencoding/json reads\n%v", data, want)
	}
}
