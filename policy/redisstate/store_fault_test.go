package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// faultyClient returns a client with toolgate's options that reaches srv
// through a fault proxy, and a client straight to srv for inspection.
func faultyClient(t *testing.T, srv *redistest.Server) (*redistest.FaultProxy, *redis.Client, *redis.Client) {
	t.Helper()
	p := redistest.StartFaultProxy(t, srv.Addr())
	opts, err := ClientOptions("redis://" + p.Addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() {
		client.Close()
		direct.Close()
	})
	return p, client, direct
}

// newFaultyStore returns a store over client, closed when the test ends.
func newFaultyStore(t *testing.T, client *redis.Client) *Store {
	s := NewStore(client, StoreOptions{Prefix: "test:" + t.Name() + ":"})
	t.Cleanup(func() {
		s.stop()
		s.bg.Wait()
	})
	return s
}

// scriptOf matches the commands that run one of the stores' scripts.
func scriptOf(name string) func(redistest.Command) bool {
	return redistest.ScriptContaining("-- toolgate " + name + "\n")
}

func TestRedisClientOptions(t *testing.T) {
	opts, err := ClientOptions("redis://user:secret@127.0.0.1:6390/3?dial_timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.ContextTimeoutEnabled || opts.MaxRetries != 3 || opts.DialerRetries != 1 || opts.DialTimeout != time.Second ||
		opts.Addr != "127.0.0.1:6390" || opts.DB != 3 || opts.Password != "secret" {
		t.Fatalf("options = %+v", opts)
	}
	if _, err := ClientOptions("http://127.0.0.1"); err == nil {
		t.Fatal("an http:// URL was accepted")
	}
}

func TestRedisStoreLostReplies(t *testing.T) {
	srv := redistest.Start(t)
	fp := policy.Fingerprint{1}
	const envelope = `{"status":"ok"}`
	for _, fault := range []redistest.Fault{redistest.CutReply, redistest.CutRequest} {
		lost := map[redistest.Fault]string{redistest.CutReply: "reply", redistest.CutRequest: "request"}[fault]

		t.Run("a claim whose "+lost+" is lost is owned by the client's retry", func(t *testing.T) {
			p, client, _ := faultyClient(t, srv)
			s := newFaultyStore(t, client)
			in := p.Add(redistest.Rule{Match: scriptOf("idempotency: claim"), Fault: fault, Times: 1})
			token := statetest.MustClaim(t, s, statetest.Key("k"), fp, time.Minute, time.Minute)
			if p.Applied(in) != 1 {
				t.Fatal("the fault was not injected")
			}
			if err := s.Complete(t.Context(), statetest.Key("k"), token, []byte(envelope), time.Minute); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			statetest.ExpectClaim(t, s, statetest.Key("k"), fp, policy.ClaimCompleted, envelope)
		})

		t.Run("a reclaim whose "+lost+" is lost is owned by the client's retry", func(t *testing.T) {
			p, client, _ := faultyClient(t, srv)
			s := newFaultyStore(t, client)
			k := statetest.Key("k")
			old := statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
			if err := s.MarkUnknown(t.Context(), k, old, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			in := p.Add(redistest.Rule{Match: scriptOf("idempotency: reclaim"), Fault: fault, Times: 1})
			c, err := s.Reclaim(t.Context(), k, fp, time.Minute, time.Minute)
			if err != nil || c.Outcome != policy.ClaimOwned || p.Applied(in) != 1 {
				t.Fatalf("Reclaim = %v, %v (fault applied %d times); want owned", c.Outcome, err, p.Applied(in))
			}
			if err := s.Complete(t.Context(), k, c.Token, []byte(envelope), time.Minute); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		})

		for _, finish := range []struct {
			name  string
			state policy.RecordState
			call  func(s *Store, k policy.IdempotencyKey, token string) error
		}{
			{"complete", policy.RecordCompleted, func(s *Store, k policy.IdempotencyKey, token string) error {
				return s.Complete(t.Context(), k, token, []byte(envelope), time.Minute)
			}},
			{"mark unknown", policy.RecordUnknown, func(s *Store, k policy.IdempotencyKey, token string) error {
				return s.MarkUnknown(t.Context(), k, token, []byte(envelope), time.Minute)
			}},
		} {
			t.Run("a "+finish.name+" whose "+lost+" is lost succeeds on the client's retry", func(t *testing.T) {
				p, client, _ := faultyClient(t, srv)
				s := newFaultyStore(t, client)
				k := statetest.Key("k")
				token := statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
				in := p.Add(redistest.Rule{Match: scriptOf("idempotency: finish"), Fault: fault, Times: 1})
				if err := finish.call(s, k, token); err != nil || p.Applied(in) != 1 {
					t.Fatalf("%s = %v (fault applied %d times); want success", finish.name, err, p.Applied(in))
				}
				r, ok, err := s.Get(t.Context(), k)
				if err != nil || !ok || r.State != finish.state || string(r.Envelope) != envelope {
					t.Fatalf("Get = %+v, %v, %v; want %v with the envelope", r, ok, err, finish.state)
				}
			})
		}

		t.Run("a release whose "+lost+" is lost succeeds on the client's retry and frees the key", func(t *testing.T) {
			p, client, _ := faultyClient(t, srv)
			s := newFaultyStore(t, client)
			k := statetest.Key("k")
			token := statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
			in := p.Add(redistest.Rule{Match: scriptOf("idempotency: release"), Fault: fault, Times: 1})
			if err := s.Release(t.Context(), k, token); err != nil || p.Applied(in) != 1 {
				t.Fatalf("Release = %v (fault applied %d times); want success", err, p.Applied(in))
			}
			statetest.ExpectAbsent(t, s, k)
			statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
		})
	}
}

func TestRedisStoreWithdrawsAClaimThatFailed(t *testing.T) {
	srv := redistest.Start(t)
	fp := policy.Fingerprint{1}

	t.Run("a claim whose reply comes after the deadline is withdrawn", func(t *testing.T) {
		p, client, direct := faultyClient(t, srv)
		s := newFaultyStore(t, client)
		k := statetest.Key("k")
		p.Add(redistest.Rule{Match: scriptOf("idempotency: claim"), Fault: redistest.DelayReply, Delay: 2 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if c, err := s.Claim(ctx, k, fp, time.Minute, time.Minute); err == nil {
			t.Fatalf("Claim = %v, want an error", c.Outcome)
		}
		// The claim ran in Redis; its withdrawal replaced it by a tombstone.
		raw := direct.Get(t.Context(), s.key(k)).Val()
		if _, released, _ := decodeRedisRecord(raw); !released {
			t.Fatalf("value = %q, want a tombstone", raw)
		}
		statetest.ExpectAbsent(t, s, k)
		statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
	})

	t.Run("a claim held by a stalled Redis leaves no record in flight", func(t *testing.T) {
		p, client, _ := faultyClient(t, srv)
		s := newFaultyStore(t, client)
		k := statetest.Key("k")
		if err := s.Ping(t.Context()); err != nil { // connections exist before the stall
			t.Fatal(err)
		}
		p.Stall()
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		began := time.Now()
		if c, err := s.Claim(ctx, k, fp, time.Minute, time.Minute); err == nil {
			t.Fatalf("Claim = %v, want an error", c.Outcome)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Fatalf("Claim took %v with a 300ms deadline and a 500ms withdrawal", took)
		}
		p.Resume() // the claim and its withdrawal reach Redis, in either order
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, ok, err := s.Get(t.Context(), k)
			if err == nil && !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Get = %+v, %v, %v; want no record once the stall ended", r, ok, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
	})

	t.Run("a release that fails against a stalled Redis is tried again until it frees the key", func(t *testing.T) {
		p, client, _ := faultyClient(t, srv)
		s := newFaultyStore(t, client)
		k := statetest.Key("k")
		token := statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
		p.Stall()
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if err := s.Release(ctx, k, token); err == nil {
			t.Fatal("Release succeeded against a stalled Redis")
		}
		p.Resume()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, ok, err := s.Get(t.Context(), k)
			if err == nil && !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Get = %+v, %v, %v; want no record once the stall ended (a claim left in flight reads as unknown after its lease)", r, ok, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
	})

	t.Run("a claim that reaches Redis after its withdrawal creates nothing", func(t *testing.T) {
		s, client := newTestRedisStore(t, srv)
		ctx := t.Context()
		key := s.key(statetest.Key("k"))
		const token = "LATECLAIM"
		if err := s.scripts.release.Run(ctx, client, []string{key}, token, 60_000).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := s.scripts.claim.Run(ctx, client, []string{key}, token, fp.String(), 60_000, 60_000).Slice()
		if err != nil {
			t.Fatal(err)
		}
		created, value, err := claimReply(res)
		if _, released, _ := decodeRedisRecord(value); err != nil || created || !released {
			t.Fatalf("late claim = %v %q, %v; want the tombstone reported", created, value, err)
		}
		res, err = s.scripts.reclaim.Run(ctx, client, []string{key}, token, fp.String(), 60_000, 60_000).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if created, _, _ := claimReply(res); created {
			t.Fatal("a late reclaim created a record")
		}
		statetest.ExpectAbsent(t, s, statetest.Key("k"))
		statetest.MustClaim(t, s, statetest.Key("k"), fp, time.Minute, time.Minute) // any other token claims over it
	})
}

func TestRedisBudgetsLostReplies(t *testing.T) {
	srv := redistest.Start(t)
	b := policy.BudgetSettings{Cost: 1, Per: time.Hour}
	window := func(t *testing.T, direct *redis.Client, s *Budgets, ch policy.BudgetCharge) string {
		t.Helper()
		return direct.Get(t.Context(), s.windowKey(ch.Caller, ch.Window)).Val()
	}
	for _, fault := range []redistest.Fault{redistest.CutReply, redistest.CutRequest} {
		lost := map[redistest.Fault]string{redistest.CutReply: "reply", redistest.CutRequest: "request"}[fault]

		t.Run("a spend whose "+lost+" is lost charges once", func(t *testing.T) {
			p, client, direct := faultyClient(t, srv)
			s := NewBudgets(client, BudgetOptions{Prefix: budgetPrefix(t)})
			in := p.Add(redistest.Rule{Match: scriptOf("budget: spend"), Fault: fault, Times: 1})
			ch := statetest.MustSpend(t, s, "ops-agent", 0.4, b)
			if !ch.OK || p.Applied(in) != 1 {
				t.Fatalf("Spend = %+v (fault applied %d times); want ok", ch, p.Applied(in))
			}
			if got := window(t, direct, s, ch); got != "400000" {
				t.Fatalf("window holds %s micro-units, want 400000 (one charge)", got)
			}
		})

		t.Run("a refund whose "+lost+" is lost gives back once", func(t *testing.T) {
			p, client, direct := faultyClient(t, srv)
			s := NewBudgets(client, BudgetOptions{Prefix: budgetPrefix(t)})
			kept := statetest.MustSpend(t, s, "ops-agent", 0.6, b)
			refunded := statetest.MustSpend(t, s, "ops-agent", 0.4, b)
			in := p.Add(redistest.Rule{Match: scriptOf("budget: refund"), Fault: fault, Times: 1})
			statetest.MustRefund(t, s, refunded)
			if p.Applied(in) != 1 {
				t.Fatal("the fault was not injected")
			}
			statetest.MustRefund(t, s, refunded) // a second refund of the same charge gives nothing either
			if got := window(t, direct, s, kept); got != "600000" {
				t.Fatalf("window holds %s micro-units, want 600000", got)
			}
			if ch := statetest.MustSpend(t, s, "ops-agent", 0.4, b); !ch.OK {
				t.Fatal("the refunded room is missing")
			}
			if ch := statetest.MustSpend(t, s, "ops-agent", 0.1, b); ch.OK {
				t.Fatal("the caller spent past its budget")
			}
		})
	}

	t.Run("a spend whose reply comes after the deadline is withdrawn", func(t *testing.T) {
		p, client, direct := faultyClient(t, srv)
		s := NewBudgets(client, BudgetOptions{Prefix: budgetPrefix(t)})
		kept := statetest.MustSpend(t, s, "ops-agent", 0.25, b)
		p.Add(redistest.Rule{Match: scriptOf("budget: spend"), Fault: redistest.DelayReply, Delay: 2 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if ch, err := s.Spend(ctx, "ops-agent", 0.5, b); err == nil {
			t.Fatalf("Spend = %+v, want an error", ch)
		}
		if got := window(t, direct, s, kept); got != "250000" {
			t.Fatalf("window holds %s micro-units, want 250000 (the failed spend withdrawn)", got)
		}
	})

	t.Run("a spend that reaches Redis after its withdrawal takes nothing", func(t *testing.T) {
		s, client := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
		ctx := t.Context()
		_, _, _, start, _ := policy.PrepareSpend("ops-agent", 1, b, time.Now())
		keys := []string{s.windowKey("ops-agent", start), s.chargeKey("ops-agent", "LATESPEND")}
		if err := redisBudgetRefund.Run(ctx, client, keys, 500_000, 60_000).Err(); err != nil {
			t.Fatal(err)
		}
		n, err := redisBudgetSpend.Run(ctx, client, keys, 500_000, 1_000_000, 60_000, 60_000).Int()
		if err != nil || n != 2 {
			t.Fatalf("late spend = %d, %v; want 2 (withdrawn)", n, err)
		}
		if exists := client.Exists(ctx, keys[0]).Val(); exists != 0 {
			t.Fatal("the late spend charged the window")
		}
	})

	t.Run("a charge without a token is not refunded", func(t *testing.T) {
		s, _ := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
		ch := statetest.MustSpend(t, s, "ops-agent", 0.5, b)
		ch.Token = ""
		if err := s.Refund(t.Context(), ch); err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("Refund without a token = %v, want an error", err)
		}
	})
}
