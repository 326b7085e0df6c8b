package contracts

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// designTableRow is one row of docs/design.md's mapping table: the reasons
// it names and its status, retryable, side_effect and HTTP cells.
type designTableRow struct {
	line                          int
	reasons                       []Reason
	status, retry, effect, httpSt string
}

// designTable reads the mapping table of docs/design.md section 2, the one
// status table of the documentation.
func designTable(t *testing.T) []designTableRow {
	t.Helper()
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "## 2. The mapping table") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatal(`docs/design.md has no "## 2. The mapping table" section`)
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	var rows []designTableRow
	inTable := false
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if !inTable {
			inTable = true
			if len(cells) != 6 || cells[0] != "reason" {
				t.Fatalf("docs/design.md:%d: the mapping table's header is %v, want reason | when | status | retryable | side_effect (SE) | HTTP", i+1, cells)
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) != 6 {
			t.Fatalf("docs/design.md:%d: %d cells, want 6", i+1, len(cells))
		}
		r := designTableRow{line: i + 1, status: cells[2], retry: cells[3], effect: cells[4], httpSt: cells[5]}
		for _, m := range name.FindAllStringSubmatch(cells[0], -1) {
			r.reasons = append(r.reasons, Reason(m[1]))
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md's mapping table has no rows")
	}
	return rows
}

// wantCells is how the table writes a row of reasonTable.
func wantCells(row reasonRow) (status, retry, effect, httpSt string) {
	switch row.Status {
	case "":
		status = map[Reason]string{ReasonRule: "the rule's", ReasonReplayed: "as stored"}[row.Reason]
	default:
		status = "`" + string(row.Status) + "`"
	}
	retry = map[retryRule]string{
		retryNever: "no", retryAlways: "yes", retryIfSafe: "if safe",
		retryByRule: "the rule's, or its status's default; SE: never `done`, and `unknown` only if the backend dedupes", retryAsStored: "as stored",
	}[row.Retry]
	effect = map[effectRule]string{
		effectNone: "`none`", effectDone: "`done`", effectByAnswer: "`done`", effectUnknown: "`unknown`",
		effectIfSent: "`unknown` once sent, else `none`", effectByRule: "the rule's; `none` for a rule on a 2xx",
		effectAsStored: "as stored",
	}[row.Effect]
	switch {
	case row.HTTP != 0:
		httpSt = strconv.Itoa(row.HTTP)
	case row.Reason == ReasonRule:
		httpSt = "by status"
	case row.Reason == ReasonReplayed:
		httpSt = "as stored"
	case row.Status == StatusUpstream && row.Retry == retryAlways:
		httpSt = "503 + Retry-After"
	case row.Status == StatusUpstream && row.Effect == effectIfSent:
		httpSt = "502 / 503"
	default:
		httpSt = strconv.Itoa(statusHTTP(row.Status, false))
	}
	return status, retry, effect, httpSt
}

// TestDesignDocumentTableIsTheReasonTable: docs/design.md's mapping table is
// the documentation's one status table, and it reads reasonTable: every
// reason on exactly one row, no other reason, and each row's status,
// retryable, side effect and HTTP status as the table has them. A reason
// added or changed here without its row there is a document that no longer
// says what the code does.
func TestDesignDocumentTableIsTheReasonTable(t *testing.T) {
	rows := designTable(t)
	where := map[Reason]designTableRow{}
	for _, r := range rows {
		if len(r.reasons) == 0 {
			t.Errorf("docs/design.md:%d: a row that names no reason", r.line)
		}
		for _, reason := range r.reasons {
			if _, ok := rowOf(reason); !ok {
				t.Errorf("docs/design.md:%d: %s is not a reason of contracts/reasons.go", r.line, reason)
			}
			if prev, dup := where[reason]; dup {
				t.Errorf("docs/design.md:%d: reason %s is on line %d too", r.line, reason, prev.line)
			}
			where[reason] = r
		}
	}
	for _, row := range reasonTable {
		t.Run(string(row.Reason), func(t *testing.T) {
			r, ok := where[row.Reason]
			if !ok {
				t.Fatalf("docs/design.md's mapping table has no row for reason %s", row.Reason)
			}
			status, retry, effect, httpSt := wantCells(row)
			for _, c := range []struct{ column, got, want string }{
				{"status", r.status, status},
				{"retryable", r.retry, retry},
				{"side_effect", r.effect, effect},
				{"HTTP", r.httpSt, httpSt},
			} {
				got := c.got
				if c.column == "status" && len(r.reasons) > 1 && strings.Contains(got, " / ") {
					// "`ok` / `empty`": one status per reason, in order.
					parts := strings.Split(got, " / ")
					for i, reason := range r.reasons {
						if reason == row.Reason && i < len(parts) {
							got = parts[i]
						}
					}
				}
				if got != c.want {
					t.Errorf("docs/design.md:%d: %s is %q, reasons.go says %q", r.line, c.column, c.got, c.want)
				}
			}
		})
	}
}
