package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
)

// redisPolicy keeps state in the Redis at url.
func redisPolicy(url string) string {
	return `version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:00"
state:
  backend: redis
  redis_url: ` + url + `
upstreams:
  notify:
    url: http://127.0.0.1:9
tools:
  send_notification:
    description: Send a notification.
    upstream: notify
    side_effect: true
    args: {type: object, required: [text], properties: {text: {type: string}}}
    request: {method: POST, path: /v1/notifications, body: {text: text}}
`
}

// infoField reads a numeric field of Redis INFO.
func infoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// waitReady polls /readyz until its status is want, and returns the body.
func (ts *testServer) waitReady(want int) string {
	ts.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := ts.get("/readyz")
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("/readyz = %d %q, want %d", code, body, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReadyzFollowsWhetherRedisAcceptsWrites makes a real Redis refuse
// writes (out of memory under noeviction, then a read-only replica): every
// side-effecting call would fail closed, so /readyz fails and says why, and
// recovers when Redis does.
func TestReadyzFollowsWhetherRedisAcceptsWrites(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(redisPolicy(srv.URL())), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, path, serverOptions{})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { direct.Close() })
	ctx := t.Context()
	if body := ts.waitReady(200); body != "ready\n" {
		t.Fatalf("/readyz body %q", body)
	}

	t.Run("out of memory under noeviction", func(t *testing.T) {
		if err := direct.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := direct.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { direct.ConfigSet(context.Background(), "maxmemory", "0") })
		filled := false
		for n := 0; n < 10_000 && !filled; n++ {
			err := direct.Set(ctx, "fill:"+strconv.Itoa(n), strings.Repeat("x", 1<<10), 0).Err()
			filled = err != nil && strings.Contains(err.Error(), "OOM")
		}
		if !filled {
			t.Fatal("Redis never refused a write")
		}
		// Client buffers come and go (16 KiB each) around the limit; keep
		// Redis over it whatever they do.
		used := infoField(direct.Info(ctx, "memory").Val(), "used_memory")
		if err := direct.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-64<<10, 10)).Err(); err != nil {
			t.Fatal(err)
		}
		if body := ts.waitReady(503); !strings.Contains(body, "state store") || !strings.Contains(body, "OOM") {
			t.Fatalf("/readyz body %q, want the state store's OOM error", body)
		}
		if err := direct.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		ts.waitReady(200)
	})

	t.Run("a read-only replica", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close() // a master that never answers: the server stays a read-only replica
		if err := direct.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { direct.Do(context.Background(), "REPLICAOF", "NO", "ONE") })
		if body := ts.waitReady(503); !strings.Contains(body, "state store") || !strings.Contains(body, "READONLY") {
			t.Fatalf("/readyz body %q, want the state store's READONLY error", body)
		}
		if err := direct.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		ts.waitReady(200)
	})
}
