package redisstate

import (
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/policy"
)

// NewClient returns the client of the state store st names: a single
// server (st.RedisURL, see ClientOptions), a Redis Cluster
// (st.Redis.Cluster) or a primary found through Sentinels
// (st.Redis.SentinelMaster). Every kind gets the options ClientOptions
// documents: commands bounded by their context, three retries of a lost
// reply (every script of the stores tolerates them), one dial retry and a
// dial timeout of 1s, so calls fail closed quickly while Redis is down.
//
// The Cluster client follows MOVED and ASK redirections (up to 3 per
// command, go-redis's default) and retries TRYAGAIN, so slot migrations are
// invisible to the stores, whose scripts keep all their keys in one slot.
// The Sentinel client asks the Sentinels for the primary, and reconnects to
// the new one after a failover.
func NewClient(st policy.State) (redis.UniversalClient, error) {
	r := st.Redis
	var tlsConfig *tls.Config
	if r.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if r.Cluster == "" && r.SentinelMaster == "" {
		if st.RedisURL == "" {
			return nil, errors.New("no redis named: set a url, a cluster or a sentinel")
		}
		opts, err := ClientOptions(st.RedisURL)
		if err != nil {
			return nil, err
		}
		return redis.NewClient(opts), nil
	}
	// One set of options for both kinds; go-redis's universal client makes
	// a failover client when a master is named and a cluster client
	// otherwise (IsClusterMode: even from a single seed address).
	opts := &redis.UniversalOptions{
		Username:              r.Username,
		Password:              r.Password,
		TLSConfig:             tlsConfig,
		ContextTimeoutEnabled: true,
		MaxRetries:            3,
		DialerRetries:         1,
		DialTimeout:           time.Second,
	}
	if r.SentinelMaster != "" {
		opts.MasterName = r.SentinelMaster
		opts.Addrs = splitAddrs(r.Sentinels)
		opts.SentinelUsername, opts.SentinelPassword = r.SentinelUsername, r.SentinelPassword
		opts.DB = r.DB
	} else {
		opts.Addrs = splitAddrs(r.Cluster)
		opts.IsClusterMode = true
	}
	return redis.NewUniversalClient(opts), nil
}

// splitAddrs splits a comma-separated address list, as policy.State keeps it.
func splitAddrs(s string) []string {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
