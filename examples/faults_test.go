package examples

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startFaults(t *testing.T, opts FaultOptions) (*FaultBackend, *http.Client) {
	t.Helper()
	b := NewFaultBackend(opts)
	if err := b.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		b.Close()
	})
	return b, client
}

// faultSend writes with a nonce and a named fault; it returns the answer, or
// the transport error.
func faultSend(client *http.Client, b *FaultBackend, nonce, fault, key string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, b.URL()+"/send", strings.NewReader(`{"nonce":"`+nonce+`","text":"t","fault":"`+fault+`"}`))
	req.Header.Set("X-Request-Id", "r-"+nonce)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestFaultKindsBehaveAsDocumented(t *testing.T) {
	b, client := startFaults(t, FaultOptions{OversizedBytes: 4096, Delay: 10 * time.Millisecond})
	tests := []struct {
		fault    FaultKind
		code     int  // 0: no answer
		cutBody  bool // the body ends early
		contains string
	}{
		{FaultNone, 201, false, `"nonce":"n-none"`},
		{FaultEmpty, 204, false, ""},
		{FaultDelay, 201, false, `"id"`},
		{FaultResetBefore, 0, false, ""},
		{FaultResetAfter, 0, false, ""},
		{Fault500, 500, false, FaultInternalHost},
		{Fault502, 502, false, FaultInternalHost},
		{Fault503, 503, false, ""},
		{Fault504, 504, false, ""},
		{Fault429, 429, false, ""},
		{Fault404, 404, false, ""},
		{FaultNonJSON, 200, false, "<html>"},
		{FaultTruncated, 200, true, ""},
		{FaultOversized, 200, false, strings.Repeat("x", 4000)},
		{FaultDrip, 201, false, `"id"`},
		{FaultStray, 201, false, `"nonce":"n-stray"`},
		{FaultCloseEarly, 201, false, `"nonce":"n-close_early"`},
	}
	for _, tt := range tests {
		t.Run(string(tt.fault), func(t *testing.T) {
			nonce := "n-" + string(tt.fault)
			resp, body, err := faultSend(client, b, nonce, string(tt.fault), "")
			switch {
			case tt.code == 0:
				if err == nil {
					t.Fatalf("answered %d, want a reset", resp.StatusCode)
				}
			case tt.cutBody:
				if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("body read error %v, want a cut body", err)
				}
			case err != nil:
				t.Fatal(err)
			case resp.StatusCode != tt.code || !strings.Contains(string(body), tt.contains):
				t.Fatalf("answer %d %.200s", resp.StatusCode, body)
			}
			if tt.fault == Fault503 || tt.fault == Fault429 {
				if resp.Header.Get("Retry-After") != "1" {
					t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
				}
			}
			want := 0
			if tt.fault.PerformsEffect() {
				want = 1
			}
			if got := b.Effects(nonce); got != want {
				t.Errorf("effects = %d, want %d", got, want)
			}
			arr := b.Arrivals("r-" + nonce)
			if len(arr) != 1 || arr[0].Fault != tt.fault || !arr[0].Named || arr[0].Effect != (want == 1) {
				t.Errorf("arrivals = %+v", arr)
			}
		})
	}
	t.Run("hang answers nothing until the caller goes away", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL()+"/search?q=x&fault=hang", nil)
		start := time.Now()
		if _, err := client.Do(req); err == nil || time.Since(start) < 150*time.Millisecond {
			t.Fatalf("err = %v after %v", err, time.Since(start))
		}
	})
	t.Run("an unknown fault is refused", func(t *testing.T) {
		resp, _, err := faultSend(client, b, "n-x", "meteor", "")
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("%v %v", resp, err)
		}
	})
}

func TestFaultBackendDedupesOnTheKey(t *testing.T) {
	b, client := startFaults(t, FaultOptions{})
	_, first, err := faultSend(client, b, "d1", "reset_after", "k1")
	if err == nil {
		t.Fatalf("answered %s, want a reset", first)
	}
	_, again, err := faultSend(client, b, "d1", "none", "k1")
	if err != nil || b.Effects("d1") != 1 || !strings.Contains(string(again), `"nonce":"d1"`) {
		t.Fatalf("retry: %s %v, effects %d", again, err, b.Effects("d1"))
	}
	if arr := b.Arrivals("r-d1"); len(arr) != 2 || !arr[1].Deduped || arr[1].Effect {
		t.Errorf("arrivals = %+v", arr)
	}
	b.Forget("d1", "r-d1", "k1")
	if b.Effects("d1") != 0 || len(b.Arrivals("r-d1")) != 0 {
		t.Error("Forget kept records")
	}
}

func TestFaultScheduleIsSeeded(t *testing.T) {
	draw := func(seed uint64) []FaultKind {
		b := NewFaultBackend(FaultOptions{Seed: seed, Weights: DefaultFaultWeights(), BurstMax: 3})
		var out []FaultKind
		for range 200 {
			b.mu.Lock()
			out = append(out, b.drawLocked())
			b.mu.Unlock()
		}
		return out
	}
	a, again, other := draw(7), draw(7), draw(8)
	if strings.Join(kinds(a), ",") != strings.Join(kinds(again), ",") {
		t.Error("one seed drew two schedules")
	}
	if strings.Join(kinds(a), ",") == strings.Join(kinds(other), ",") {
		t.Error("two seeds drew one schedule")
	}
	seen := map[FaultKind]bool{}
	for _, k := range draw(1) {
		seen[k] = true
	}
	if !seen[FaultNone] || len(seen) < 8 {
		t.Errorf("200 draws met only %v", seen)
	}
	if k := NewFaultBackend(FaultOptions{}).drawLocked(); k != FaultNone {
		t.Errorf("no weights drew %s", k)
	}
}

func kinds(ks []FaultKind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func TestFaultBackendRefusesThenServesOnTheSamePort(t *testing.T) {
	b, client := startFaults(t, FaultOptions{RefuseFor: 300 * time.Millisecond})
	addr := b.Addr()
	if _, _, err := faultSend(client, b, "r1", "refuse", ""); err == nil {
		t.Fatal("the refusing request was answered")
	}
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during the outage: %v, want connection refused", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get(b.URL() + "/search?q=x")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served again: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.Addr() != addr {
		t.Errorf("served again on %s, not %s", b.Addr(), addr)
	}
	out := b.Outages()
	if len(out) != 1 || out[0].To.Sub(out[0].From) < 250*time.Millisecond {
		t.Errorf("outages = %+v", out)
	}
	b.Stop()
	if _, err := client.Get(b.URL() + "/health"); err == nil {
		t.Error("answered after Stop")
	}
	if err := b.Start(""); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get(b.URL() + "/health"); err != nil {
		t.Errorf("after Start: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestFaultsPolicyNamesEveryFault(t *testing.T) {
	doc := string(FaultsPolicy())
	for _, k := range FaultKinds() {
		if !strings.Contains(doc, string(k)) {
			t.Errorf("examples/faults.yaml does not offer %s", k)
		}
	}
}

// rawExchange writes one HTTP/1.1 request on conn and reads its answer.
func rawExchange(t *testing.T, conn net.Conn, br *bufio.Reader, method, target, body string) (*http.Response, []byte) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: faults\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s", method, target, target, len(body), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// TestFaultStrayWritesPastTheAnswerAndServesOn: FaultStray answers well,
// then bytes nobody asked for follow on the connection (a second answer or
// the rest of a body longer than its Content-Length), and the connection
// is served on, as a broken legacy server does.
func TestFaultStrayWritesPastTheAnswerAndServesOn(t *testing.T) {
	b, _ := startFaults(t, FaultOptions{})
	conn, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	strays := map[string]bool{}
	for i, tc := range []struct{ method, target, body string }{
		{"GET", "/search?q=a&fault=stray", ""},
		{"POST", "/send", `{"nonce":"n-stray","text":"t","fault":"stray"}`},
	} {
		resp, raw := rawExchange(t, conn, br, tc.method, tc.target, tc.body)
		if resp.StatusCode/100 != 2 || resp.Close || !json.Valid(raw) {
			t.Fatalf("answer %d: %d close=%v %q", i, resp.StatusCode, resp.Close, raw)
		}
		// The stray bytes are there before the next request is sent.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.Peek(1); err != nil {
			t.Fatalf("no stray bytes after answer %d: %v", i, err)
		}
		stray := make([]byte, br.Buffered())
		_, _ = io.ReadFull(br, stray)
		if !bytes.Equal(stray, strayBytes(0)) && !bytes.Equal(stray, strayBytes(1)) {
			t.Errorf("stray bytes %q", stray)
		}
		strays[string(stray)] = true
	}
	if len(strays) != 2 {
		t.Errorf("stray bytes seen: %v, want both kinds", strays)
	}
	if resp, _ := rawExchange(t, conn, br, "GET", "/search?q=after", ""); resp.StatusCode != 200 {
		t.Errorf("the connection was not served on: %d", resp.StatusCode)
	}
	if got := b.Effects("n-stray"); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
}

// TestFaultCloseEarlyClosesAfterTheAnswer: FaultCloseEarly answers well,
// without Connection: close, and the connection ends right after.
func TestFaultCloseEarlyClosesAfterTheAnswer(t *testing.T) {
	b, _ := startFaults(t, FaultOptions{})
	for _, tc := range []struct{ method, target, body string }{
		{"GET", "/search?q=a&fault=close_early", ""},
		{"POST", "/send", `{"nonce":"n-close","text":"t","fault":"close_early"}`},
	} {
		conn, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, raw := rawExchange(t, conn, br, tc.method, tc.target, tc.body)
		if resp.StatusCode/100 != 2 || resp.Close || !json.Valid(raw) {
			t.Errorf("%s %s: %d close=%v %q", tc.method, tc.target, resp.StatusCode, resp.Close, raw)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s %s: after the answer %v, want the end of the connection", tc.method, tc.target, err)
		}
		conn.Close()
	}
	if got := b.Effects("n-close"); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
}
