package redistest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// proxied returns a client through a fault proxy in front of srv, and a
// client straight to srv. The proxied client never retries, so each fault
// shows as an error.
func proxied(t *testing.T, srv *Server, protocol int) (*FaultProxy, *redis.Client, *redis.Client) {
	t.Helper()
	p := StartFaultProxy(t, srv.Addr())
	through := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, Protocol: protocol, ContextTimeoutEnabled: true})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() {
		through.Close()
		direct.Close()
	})
	return p, through, direct
}

func TestFaultProxy(t *testing.T) {
	srv := Start(t)
	for _, protocol := range []int{2, 3} {
		t.Run("RESP"+string(rune('0'+protocol)), func(t *testing.T) {
			testFaultProxy(t, srv, protocol)
		})
	}
}

func testFaultProxy(t *testing.T, srv *Server, protocol int) {
	ctx := context.Background()

	t.Run("commands and replies of every shape pass through untouched", func(t *testing.T) {
		_, c, _ := proxied(t, srv, protocol)
		key := t.Name()
		if err := c.HSet(ctx, key, "a", "1", "b", "2").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := c.HGetAll(ctx, key).Result()
		if err != nil || len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
			t.Fatalf("HGETALL = %v, %v", got, err)
		}
		if err := c.Get(ctx, key+":absent").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET of an absent key = %v, want redis.Nil", err)
		}
		if err := c.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil {
			t.Fatal("an unknown command succeeded")
		}
		vals, err := c.Eval(ctx, "return {1, 'x', {2}}", nil).Slice()
		if err != nil || len(vals) != 3 {
			t.Fatalf("EVAL = %v, %v", vals, err)
		}
	})

	t.Run("a cut reply is lost after the command ran", func(t *testing.T) {
		p, c, direct := proxied(t, srv, protocol)
		key := t.Name()
		in := p.Add(Rule{Match: Named("set"), Fault: CutReply, Times: 1})
		if err := c.Set(ctx, key, "v", time.Minute).Err(); !errors.Is(err, io.EOF) {
			t.Fatalf("SET with its reply cut = %v, want EOF", err)
		}
		if got := direct.Get(ctx, key).Val(); got != "v" {
			t.Fatalf("the value is %q, want the command to have run", got)
		}
		if err := c.Set(ctx, key, "w", time.Minute).Err(); err != nil {
			t.Fatalf("the next SET: %v", err)
		}
		if n := p.Applied(in); n != 1 {
			t.Fatalf("applied %d times, want 1", n)
		}
	})

	t.Run("a cut request never reaches the server", func(t *testing.T) {
		p, c, direct := proxied(t, srv, protocol)
		key := t.Name()
		p.Add(Rule{Match: Named("SET"), Fault: CutRequest, Times: 1})
		if err := c.Set(ctx, key, "v", time.Minute).Err(); err == nil {
			t.Fatal("SET with its request cut succeeded")
		}
		if n := direct.Exists(ctx, key).Val(); n != 0 {
			t.Fatal("the command ran")
		}
	})

	t.Run("scripts are matched by their text under EVAL and EVALSHA", func(t *testing.T) {
		p, c, direct := proxied(t, srv, protocol)
		script := redis.NewScript("-- faultproxy test\nreturn redis.call('INCR', KEYS[1])")
		other := redis.NewScript("return 7")
		key := t.Name()
		// The server knows the script from another subtest; this proxy
		// answers the first EVALSHA with NOSCRIPT and learns it from the EVAL.
		if err := script.Load(ctx, direct).Err(); err != nil {
			t.Fatal(err)
		}
		if err := script.Run(ctx, c, []string{key}).Err(); err != nil {
			t.Fatal(err)
		}
		in := p.Add(Rule{Match: ScriptContaining("faultproxy test"), Fault: CutReply})
		if err := other.Run(ctx, c, nil).Err(); err != nil {
			t.Fatalf("another script: %v", err)
		}
		if err := script.Run(ctx, c, []string{key}).Err(); !errors.Is(err, io.EOF) {
			t.Fatalf("EVALSHA of the matched script = %v, want EOF", err)
		}
		if err := script.Eval(ctx, c, []string{key}).Err(); !errors.Is(err, io.EOF) {
			t.Fatalf("EVAL of the matched script = %v, want EOF", err)
		}
		if n := p.Applied(in); n != 2 {
			t.Fatalf("applied %d times, want 2", n)
		}
		p.Remove(in)
		if n, err := script.Run(ctx, c, []string{key}).Int(); err != nil || n != 4 {
			t.Fatalf("after Remove: %d, %v; want the fourth increment", n, err)
		}
	})

	t.Run("a delayed reply comes late", func(t *testing.T) {
		p, c, _ := proxied(t, srv, protocol)
		p.Add(Rule{Match: Named("PING"), Fault: DelayReply, Delay: 300 * time.Millisecond, Times: 1})
		began := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < 300*time.Millisecond {
			t.Fatalf("the reply came after %v, want at least the delay", took)
		}
	})

	t.Run("a stall holds commands until resumed, even from a client that gave up", func(t *testing.T) {
		p, c, direct := proxied(t, srv, protocol)
		key := t.Name()
		if err := c.Ping(ctx).Err(); err != nil { // a connection exists before the stall
			t.Fatal(err)
		}
		p.Stall()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := c.Set(short, key, "late", time.Minute).Err(); err == nil {
			t.Fatal("SET during the stall succeeded")
		}
		if n := direct.Exists(ctx, key).Val(); n != 0 {
			t.Fatal("the command ran during the stall")
		}
		p.Resume()
		deadline := time.Now().Add(5 * time.Second)
		for direct.Get(ctx, key).Val() != "late" {
			if time.Now().After(deadline) {
				t.Fatal("the held command never reached the server")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("after Resume: %v", err)
		}
	})
}
