package contracts

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// Problem names what was wrong with an argument, or with the arguments as a
// whole. The names appear in bad_args data (data.errors[].problem) and are
// stable.
type Problem string

// The problems an argument error can report.
const (
	ProblemRequired   Problem = "required"
	ProblemUnexpected Problem = "unexpected"
	ProblemType       Problem = "type"
	ProblemMinimum    Problem = "minimum"
	ProblemMaximum    Problem = "maximum"
	ProblemExclMin    Problem = "exclusive_minimum"
	ProblemExclMax    Problem = "exclusive_maximum"
	ProblemMultipleOf Problem = "multiple_of"
	ProblemMinLength  Problem = "min_length"
	ProblemMaxLength  Problem = "max_length"
	ProblemPattern    Problem = "pattern"
	ProblemEnum       Problem = "enum"
	ProblemFormat     Problem = "format"
	ProblemMinItems   Problem = "min_items"
	ProblemMaxItems   Problem = "max_items"
	ProblemUnique     Problem = "unique"
	ProblemContains   Problem = "contains"
	ProblemInvalid    Problem = "invalid"
	ProblemScalar     Problem = "scalar"   // a bound argument that is not a string, number or boolean
	ProblemSegment    Problem = "segment"  // a path argument that would make an empty segment, or one a server may read as "." or ".."
	ProblemNumber     Problem = "number"   // a number beyond the argument bounds (numbers.go)
	ProblemRepeated   Problem = "repeated" // a query parameter given several values for a single one
	ProblemQuery      Problem = "query"    // a legacy request's query string that does not parse

	// Problems of a legacy request's form or multipart body (legacy_body.go).
	ProblemFormFields   Problem = "too_many_fields" // more fields or parts than MaxFormFields (Max: the limit)
	ProblemFormBoundary Problem = "no_boundary"     // multipart/form-data without a boundary parameter
	ProblemFormSyntax   Problem = "bad_form"        // a body that does not parse (Got: its media type as a JSON string)
	ProblemPartHeader   Problem = "part_header"     // a part's headers past MaxPartHeaderBytes (Max: the limit)
	ProblemNotText      Problem = "not_text"        // a file or non-text part (Pointer: its field; Got: its file name or media type as a JSON string)

	// Problems of the request body as a whole (reason bad_json).
	ProblemNotJSON      Problem = "not_json"
	ProblemNotUTF8      Problem = "not_utf8"
	ProblemNotObject    Problem = "not_object"
	ProblemDuplicateKey Problem = "duplicate_key"
	ProblemTooDeep      Problem = "too_deep"
	ProblemIncomplete   Problem = "incomplete" // the client stopped sending the body
	ProblemMediaType    Problem = "media_type" // a body that is not application/json (Got: its media type as a JSON string, "" for none)
)

// body reports whether the problem is with the request body as a whole.
func (p Problem) body() bool {
	switch p {
	case ProblemNotJSON, ProblemNotUTF8, ProblemNotObject, ProblemDuplicateKey, ProblemTooDeep, ProblemIncomplete, ProblemMediaType:
		return true
	}
	return false
}

// ArgError says what is wrong with one argument, and what is allowed, in
// terms fit for a model. Its fields are language-neutral: text renders it in
// a catalogue's language, appendJSON as an entry of data.errors.
type ArgError struct {
	Pointer string  // JSON pointer of the argument, e.g. "/limit"; "" for the arguments as a whole
	Problem Problem // what kind of check failed
	// Min and Max are the bounds, as JSON numbers, on the value (minimum,
	// maximum and their exclusive forms), its length in characters
	// (min_length, max_length), its number of items (min_items, max_items)
	// or the body's nesting (too_deep); "" where there is none.
	Min, Max     string
	MinExclusive bool
	MaxExclusive bool
	// Values are the allowed values as JSON (enum, const), or the allowed
	// type names (type).
	Values []string
	// Want is the one thing allowed: the pattern, the format's name, or the
	// divisor of multiple_of.
	Want string
	// Accepted are the argument names accepted where an unexpected one was
	// found, sorted.
	Accepted []string
	// Got is what was found: the value as JSON (long strings shortened), or
	// for length and count problems the length or count. "" when not shown.
	Got string
	// Detail is the schema library's own words for a keyword this package
	// does not name. They are English and shown in English only.
	Detail string
}

func (e *ArgError) Error() string { return e.text("en") }

// text renders the error as a message clause in language lang ("en" or
// "zh"), as a message gives a single error: "Argument limit must be between
// 1 and 20 (got 50)".
func (e *ArgError) text(lang string) string {
	return e.clause(lang, true)
}

// ArgErrors is every violation found in one call's arguments, in a fixed
// order: by argument (array positions in numeric order), then by problem.
// The same arguments always give the same list.
type ArgErrors struct {
	// List holds at most maxArgErrors violations.
	List []*ArgError
	// Total counts every violation found, listed or not.
	Total int
}

// maxArgErrors bounds the violations bad_args data lists; the message names
// the first messageArgErrors of them and counts the rest.
const (
	maxArgErrors     = 20
	messageArgErrors = 5
)

// newArgErrors sorts errs, drops duplicates and keeps at most maxArgErrors.
func newArgErrors(errs ...*ArgError) *ArgErrors {
	list := slices.Clone(errs)
	slices.SortStableFunc(list, compareArgErrors)
	list = slices.CompactFunc(list, func(a, b *ArgError) bool { return compareArgErrors(a, b) == 0 })
	out := &ArgErrors{List: list, Total: len(list)}
	if len(out.List) > maxArgErrors {
		out.List = out.List[:maxArgErrors:maxArgErrors]
	}
	return out
}

func (e *ArgErrors) Error() string { return e.text("en") }

// Unwrap lets errors.As find the first violation as an *ArgError.
func (e *ArgErrors) Unwrap() []error {
	out := make([]error, len(e.List))
	for i, a := range e.List {
		out[i] = a
	}
	return out
}

// text renders the violations as a message's what-happened clause: one
// error as Text gives it, several as a count and a list.
func (e *ArgErrors) text(lang string) string {
	if len(e.List) == 1 && e.Total == 1 {
		return e.List[0].clause(lang, true)
	}
	var b strings.Builder
	if lang == "zh" {
		b.WriteString("有 " + strconv.Itoa(e.Total) + " 处参数错误：")
	} else {
		b.WriteString(strconv.Itoa(e.Total) + " arguments are invalid: ")
	}
	shown := min(len(e.List), messageArgErrors)
	for i, a := range e.List[:shown] {
		if i > 0 {
			b.WriteString(semicolon(lang))
		}
		b.WriteString(a.clause(lang, false))
	}
	if more := e.Total - shown; more > 0 {
		if lang == "zh" {
			b.WriteString("；另有 " + strconv.Itoa(more) + " 处")
		} else {
			b.WriteString("; and " + strconv.Itoa(more) + " more")
		}
	}
	return b.String()
}

func semicolon(lang string) string {
	if lang == "zh" {
		return "；"
	}
	return "; "
}

// appendJSON appends the bad_args data: {"errors":[...]} with "more" when
// violations were left out of the list. See docs/design.md, "The envelope".
func (e *ArgErrors) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"errors":[`...)
	for i, a := range e.List {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = a.appendJSON(dst)
	}
	dst = append(dst, ']')
	if more := e.Total - len(e.List); more > 0 {
		dst = append(dst, `,"more":`...)
		dst = strconv.AppendInt(dst, int64(more), 10)
	}
	return append(dst, '}')
}

// appendJSON appends the error as one entry of data.errors:
// {"argument","problem"} and, where known, "allowed" (an object of bounds
// or of the pattern, format or divisor; an array of the allowed values or
// type names), "accepted" (argument names) and "got".
func (e *ArgError) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"argument":`...)
	dst = AppendJSONString(dst, e.Pointer)
	dst = append(dst, `,"problem":`...)
	dst = AppendJSONString(dst, string(e.Problem))
	switch {
	case e.Min != "" || e.Max != "":
		dst = append(dst, `,"allowed":{`...)
		n := 0
		member := func(key, num string) {
			if num == "" {
				return
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = AppendJSONString(dst, key)
			dst = append(dst, ':')
			dst = append(dst, num...)
		}
		member(boundKey("minimum", e.MinExclusive), e.Min)
		member(boundKey("maximum", e.MaxExclusive), e.Max)
		dst = append(dst, '}')
	case len(e.Values) > 0:
		dst = append(dst, `,"allowed":[`...)
		for i, v := range e.Values {
			if i > 0 {
				dst = append(dst, ',')
			}
			if e.Problem == ProblemType {
				dst = AppendJSONString(dst, v)
			} else {
				dst = append(dst, v...)
			}
		}
		dst = append(dst, ']')
	case e.Want != "":
		if key := wantKey(e.Problem); key != "" {
			dst = append(dst, `,"allowed":{`...)
			dst = AppendJSONString(dst, key)
			dst = append(dst, ':')
			if e.Problem == ProblemMultipleOf {
				dst = append(dst, e.Want...)
			} else {
				dst = AppendJSONString(dst, e.Want)
			}
			dst = append(dst, '}')
		}
	}
	if len(e.Accepted) > 0 {
		dst = append(dst, `,"accepted":[`...)
		for i, name := range e.Accepted {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, name)
		}
		dst = append(dst, ']')
	}
	if e.Got != "" {
		dst = append(dst, `,"got":`...)
		dst = append(dst, e.Got...)
	}
	return append(dst, '}')
}

// wantKey names the one allowed thing of a problem in data.errors.
func wantKey(p Problem) string {
	switch p {
	case ProblemPattern:
		return "pattern"
	case ProblemFormat:
		return "format"
	case ProblemMultipleOf:
		return "multiple_of"
	}
	return ""
}

func boundKey(key string, exclusive bool) string {
	if exclusive {
		return "exclusive_" + key
	}
	return key
}

// compareArgErrors orders errors by argument, array positions numerically,
// then by problem and the rest of what they say.
func compareArgErrors(a, b *ArgError) int {
	if c := comparePointers(a.Pointer, b.Pointer); c != 0 {
		return c
	}
	return cmp.Or(
		cmp.Compare(a.Problem, b.Problem),
		cmp.Compare(a.Got, b.Got),
		cmp.Compare(a.Min, b.Min),
		cmp.Compare(a.Max, b.Max),
		cmp.Compare(a.Want, b.Want),
		slices.Compare(a.Values, b.Values),
		cmp.Compare(a.Detail, b.Detail),
	)
}

func comparePointers(a, b string) int {
	ta, tb := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(ta) && i < len(tb); i++ {
		x, y := ta[i], tb[i]
		if x == y {
			continue
		}
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		if ex == nil && ey == nil {
			return cmp.Compare(nx, ny)
		}
		return cmp.Compare(x, y)
	}
	return cmp.Compare(len(ta), len(tb))
}

// argName is how a message names the argument at a JSON pointer:
// "/items/1/qty" reads "items[1].qty"; "" (the whole) reads "".
func argName(ptr string) string {
	if ptr == "" {
		return ""
	}
	var b strings.Builder
	for i, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && i > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// bodyProblemWords say the body's problems, which need no argument name:
// in English and in Chinese.
var bodyProblemWords = map[Problem]func(e *ArgError) (en, zh string){
	ProblemNotJSON:    func(*ArgError) (string, string) { return "it is not valid JSON", "不是有效的 JSON" },
	ProblemNotUTF8:    func(*ArgError) (string, string) { return "it is not valid UTF-8", "不是有效的 UTF-8 编码" },
	ProblemNotObject:  func(*ArgError) (string, string) { return "it is not an object", "它不是对象" },
	ProblemIncomplete: func(*ArgError) (string, string) { return "it is incomplete", "请求体不完整" },
	ProblemDuplicateKey: func(e *ArgError) (string, string) {
		return "the key " + e.Got + " appears twice", "键 " + e.Got + " 出现了两次"
	},
	ProblemTooDeep: func(e *ArgError) (string, string) {
		return "it is nested deeper than " + e.Max + " levels", "嵌套超过了 " + e.Max + " 层"
	},
	ProblemMediaType: func(e *ArgError) (string, string) {
		if len(e.Values) > 0 { // a legacy route, which takes more than JSON
			want := make([]string, len(e.Values))
			for i, v := range e.Values {
				want[i], _ = strconv.Unquote(v) // media types: JSON strings of ASCII, as Go quotes them
			}
			en := strings.Join(want, ", ")
			if n := len(want); n > 1 {
				en = strings.Join(want[:n-1], ", ") + " or " + want[n-1]
			}
			return "it is sent as " + e.Got + ", not " + en, "请求体的类型是 " + e.Got + "，应为 " + strings.Join(want, "、") + " 之一"
		}
		if e.Got == `""` {
			return "it has no Content-Type; send it as application/json", "请求体没有声明 Content-Type，应为 application/json"
		}
		return "it is sent as " + e.Got + ", not application/json", "请求体的类型是 " + e.Got + "，应为 application/json"
	},
}

// clause renders the error in lang. single says it is the message's only
// error, which then names the argument as a sentence does ("Argument limit
// must …", "参数 limit 必须…"); in a list it is bare ("limit must …").
func (e *ArgError) clause(lang string, single bool) string {
	if words, ok := bodyProblemWords[e.Problem]; ok {
		en, zh := words(e)
		if lang == "zh" {
			return zh
		}
		return en
	}
	name := argName(e.Pointer)
	if lang == "zh" {
		return e.zh(name, single)
	}
	return e.en(name, single)
}

func (e *ArgError) en(name string, single bool) string {
	var rest string
	got := ""
	if e.Got != "" {
		got = " (got " + e.Got + ")"
	}
	switch e.Problem {
	case ProblemRequired:
		rest = "is required"
	case ProblemUnexpected:
		rest = "is not an accepted argument"
		if len(e.Accepted) > 0 {
			rest = "is not accepted (accepted: " + shorten(strings.Join(e.Accepted, ", "), 160) + ")"
		}
	case ProblemType:
		want := make([]string, len(e.Values))
		for i, v := range e.Values {
			want[i] = typeEN(v)
		}
		rest = "must be " + strings.Join(want, " or ")
		if e.Got != "" {
			rest += " (got " + valueEN(e.Got)
			if wantsNumber(e.Values) && quotedNumber(e.Got) {
				rest += "; send it without quotes"
			}
			rest += ")"
		}
	case ProblemMinimum, ProblemMaximum, ProblemExclMin, ProblemExclMax:
		rest = "must be " + rangeEN(e) + got
	case ProblemMinLength, ProblemMaxLength:
		rest = "must have " + countEN(e, "character", "characters") + got
	case ProblemMinItems, ProblemMaxItems:
		rest = "must have " + countEN(e, "item", "items") + got
	case ProblemMultipleOf:
		rest = "must be a multiple of " + e.Want + got
	case ProblemPattern:
		rest = "must match the pattern " + e.Want + got
	case ProblemEnum:
		if len(e.Values) == 1 {
			rest = "must be " + e.Values[0] + got
		} else {
			rest = "must be one of " + shorten(strings.Join(e.Values, ", "), 160) + got
		}
	case ProblemFormat:
		rest = "must be a valid " + e.Want + got
	case ProblemUnique:
		rest = "must not contain duplicate items"
	case ProblemContains:
		rest = "must contain at least one item that matches its schema"
	case ProblemScalar:
		rest = "must be a string, number or boolean to be sent in the request" + got
	case ProblemSegment:
		rest = `must not be empty, "." or "..", nor anything a server may decode to them (such as %2e%2e or ../x)`
	case ProblemNumber:
		rest = "must be a number with at most " + strconv.Itoa(maxNumberDigits) + " significant digits, zero or between 1e-" +
			strconv.Itoa(maxNumberExponent) + " and 1e" + strconv.Itoa(maxNumberExponent) + " in magnitude" + got
	case ProblemRepeated:
		rest = "takes one value" + got
	case ProblemQuery:
		return capitalIf(single, "the query string is not well formed")
	case ProblemFormFields:
		return capitalIf(single, "the body has more than "+e.Max+" fields")
	case ProblemFormBoundary:
		return capitalIf(single, "the multipart/form-data body has no boundary parameter in its Content-Type")
	case ProblemFormSyntax:
		return capitalIf(single, "the "+e.Got+" body is not well formed")
	case ProblemPartHeader:
		return capitalIf(single, "a part of the body has headers longer than "+e.Max+" bytes")
	case ProblemNotText:
		return capitalIf(single, "field "+name+" is a file or a part that is not text"+got+"; this route takes text fields only")
	default:
		rest = "does not match the schema"
		if e.Detail != "" {
			rest += " (" + e.Detail + ")"
		}
	}
	switch {
	case name == "":
		return capitalIf(single, "the arguments") + " " + rest
	case single:
		return "Argument " + name + " " + rest
	}
	return name + " " + rest
}

func (e *ArgError) zh(name string, single bool) string {
	got := ""
	if e.Got != "" {
		got = "（当前为 " + e.Got + "）"
	}
	subject := name + " "
	switch {
	case name == "":
		subject = "参数对象"
	case single:
		subject = "参数 " + name + " "
	}
	switch e.Problem {
	case ProblemRequired:
		return "缺少必填参数 " + nameOrWhole(name)
	case ProblemUnexpected:
		s := "不接受参数 " + nameOrWhole(name)
		if len(e.Accepted) > 0 {
			s += "（可用参数：" + shorten(strings.Join(e.Accepted, "、"), 160) + "）"
		}
		return s
	case ProblemType:
		want := make([]string, len(e.Values))
		for i, v := range e.Values {
			want[i] = typeZH(v)
		}
		s := subject + "必须是" + strings.Join(want, "或")
		if e.Got != "" {
			s += "（当前为" + valueZH(e.Got)
			if wantsNumber(e.Values) && quotedNumber(e.Got) {
				s += "，请去掉引号"
			}
			s += "）"
		}
		return s
	case ProblemMinimum, ProblemMaximum, ProblemExclMin, ProblemExclMax:
		return subject + "必须" + rangeZH(e) + got
	case ProblemMinLength, ProblemMaxLength:
		return subject + "的长度必须" + countZH(e, "个字符") + countGotZH(e.Got, "个")
	case ProblemMinItems, ProblemMaxItems:
		return subject + "必须包含" + countZH(e, "项") + countGotZH(e.Got, "项")
	case ProblemMultipleOf:
		return subject + "必须是 " + e.Want + " 的倍数" + got
	case ProblemPattern:
		return subject + "必须匹配模式 " + e.Want + got
	case ProblemEnum:
		if len(e.Values) == 1 {
			return subject + "必须是 " + e.Values[0] + got
		}
		return subject + "必须是以下值之一：" + shorten(strings.Join(e.Values, "、"), 160) + got
	case ProblemFormat:
		return subject + "必须是有效的 " + e.Want + " 格式" + got
	case ProblemUnique:
		return subject + "不能包含重复项"
	case ProblemContains:
		return subject + "必须至少包含一个符合要求的项"
	case ProblemScalar:
		return subject + "必须是字符串、数字或布尔值，才能放入请求" + got
	case ProblemSegment:
		return subject + `不能为空，不能是 "." 或 ".."，也不能是服务器可能解码成二者的值`
	case ProblemNumber:
		return subject + "必须是有效数字不超过 " + strconv.Itoa(maxNumberDigits) + " 位、为零或绝对值在 1e-" +
			strconv.Itoa(maxNumberExponent) + " 与 1e" + strconv.Itoa(maxNumberExponent) + " 之间的数" + got
	case ProblemRepeated:
		return subject + "只能有一个值" + countGotZH(e.Got, "个")
	case ProblemQuery:
		return "查询字符串格式不正确"
	case ProblemFormFields:
		return "请求体的字段超过 " + e.Max + " 个"
	case ProblemFormBoundary:
		return "multipart/form-data 请求体的 Content-Type 缺少 boundary 参数"
	case ProblemFormSyntax:
		return e.Got + " 请求体格式不正确"
	case ProblemPartHeader:
		return "请求体某一部分的头部超过 " + e.Max + " 字节"
	case ProblemNotText:
		return "字段 " + name + " 是文件或非文本部分" + got + "；此路由只接受文本字段"
	}
	return subject + "不符合参数约定"
}

func nameOrWhole(name string) string {
	if name == "" {
		return "（参数对象）"
	}
	return name
}

// capitalIf upper-cases the first letter of s when cond holds.
func capitalIf(cond bool, s string) string {
	if !cond || s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

func typeEN(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	case "null":
		return "null"
	}
	return "a " + t
}

func typeZH(t string) string {
	switch t {
	case "integer":
		return "整数"
	case "number":
		return "数字"
	case "string":
		return "字符串"
	case "boolean":
		return "布尔值"
	case "array":
		return "数组"
	case "object":
		return "对象"
	}
	return "空值"
}

// jsonKind is the JSON type of a value written as JSON.
func valueKind(v string) string {
	switch {
	case v == "":
		return ""
	case v[0] == '"':
		return "string"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v == "true" || v == "false":
		return "boolean"
	case v == "null":
		return "null"
	}
	return "number"
}

func valueEN(v string) string {
	switch k := valueKind(v); k {
	case "string", "number":
		return "the " + k + " " + v
	case "object", "array":
		return typeEN(k)
	}
	return v
}

func valueZH(v string) string {
	switch k := valueKind(v); k {
	case "string", "number", "boolean":
		return typeZH(k) + " " + v
	case "object", "array":
		return typeZH(k)
	}
	return " " + v // null
}

func wantsNumber(types []string) bool {
	return slices.Contains(types, "integer") || slices.Contains(types, "number")
}

// quotedNumber reports whether a JSON value is a string holding a number.
func quotedNumber(v string) bool {
	return len(v) > 2 && v[0] == '"' && jsontape.IsNumber(v[1:len(v)-1])
}

// rangeWords are the words of a range in one language.
type rangeWords struct {
	atLeast, atMost, greater, less string
	between                        func(lo, hi string) string
	and                            string
}

var (
	rangeWordsEN = rangeWords{"at least ", "at most ", "greater than ", "less than ",
		func(lo, hi string) string { return "between " + lo + " and " + hi }, " and "}
	rangeWordsZH = rangeWords{"不小于 ", "不大于 ", "大于 ", "小于 ",
		func(lo, hi string) string { return "在 " + lo + " 到 " + hi + " 之间" }, "且"}
)

func rangeEN(e *ArgError) string { return rangeText(e, &rangeWordsEN) }

func rangeZH(e *ArgError) string { return rangeText(e, &rangeWordsZH) }

// rangeText says the range e allows, with its bounds inclusive or not.
func rangeText(e *ArgError, w *rangeWords) string {
	lo, hi := w.atLeast+e.Min, w.atMost+e.Max
	if e.MinExclusive {
		lo = w.greater + e.Min
	}
	if e.MaxExclusive {
		hi = w.less + e.Max
	}
	switch {
	case e.Min != "" && e.Max != "" && !e.MinExclusive && !e.MaxExclusive:
		return w.between(e.Min, e.Max)
	case e.Min != "" && e.Max != "":
		return lo + w.and + hi
	case e.Min != "":
		return lo
	}
	return hi
}

func countEN(e *ArgError, one, many string) string {
	unit := func(n string) string {
		if n == "1" {
			return one
		}
		return many
	}
	switch {
	case e.Min != "" && e.Max != "":
		return "between " + e.Min + " and " + e.Max + " " + many
	case e.Min != "":
		return "at least " + e.Min + " " + unit(e.Min)
	}
	return "at most " + e.Max + " " + unit(e.Max)
}

func countZH(e *ArgError, unit string) string {
	switch {
	case e.Min != "" && e.Max != "":
		return "在 " + e.Min + " 到 " + e.Max + " " + unit + "之间"
	case e.Min != "":
		return "至少为 " + e.Min + " " + unit
	}
	return "至多为 " + e.Max + " " + unit
}

func countGotZH(got, unit string) string {
	if got == "" {
		return ""
	}
	return "（当前为 " + got + " " + unit + "）"
}

// gotLiteral is a number literal as data.errors shows it: itself, or a
// JSON string of its first runes when it is too long to repeat.
func gotLiteral(lit string) string {
	if utf8.RuneCountInString(lit) <= 40 && jsontape.IsNumber(lit) {
		return lit
	}
	return string(AppendJSONString(nil, shorten(lit, 40)))
}

// ArgOutcome is the bad_args outcome of an argument error: reason bad_json
// when the body as a whole is wrong, schema otherwise, with every violation
// in the message and in data.errors.
func ArgOutcome(err error) Outcome {
	var list *ArgErrors
	if !errors.As(err, &list) {
		var one *ArgError
		if !errors.As(err, &one) {
			one = &ArgError{Problem: ProblemInvalid}
		}
		list = newArgErrors(one)
	}
	r := ReasonSchema
	if len(list.List) == 1 && list.List[0].Problem.body() {
		r = ReasonBadJSON
	}
	o := Reject(r)
	o.Args = list
	o.Data = list.appendJSON(make([]byte, 0, 64*len(list.List)+16))
	return o
}
