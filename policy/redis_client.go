package policy

import (
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedisClient returns the client of the state store st names: a single
// server (st.RedisURL, see RedisClientOptions), a Redis Cluster
// (st.Redis.Cluster) or a primary found through Sentinels
// (st.Redis.SentinelMaster). Every kind gets the options RedisClientOptions
// documents: commands bounded by their context, three retries of a lost
// reply (every script of the stores tolerates them), one dial retry and a
// dial timeout of 1s, so calls fail closed quickly while Redis is down.
//
// The Cluster client follows MOVED and ASK redirections (up to 3 per
// command, go-redis's default) and retries TRYAGAIN, so slot migrations are
// invisible to the stores, whose scripts keep all their keys in one slot.
// The Sentinel client asks the Sentinels for the primary, and reconnects to
// the new one after a failover.
func NewRedisClient(st State) (redis.UniversalClient, error) {
	r := st.Redis
	var tlsConfig *tls.Config
	if r.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case r.Cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 splitAddrs(r.Cluster),
			Username:              r.Username,
			Password:              r.Password,
			TLSConfig:             tlsConfig,
			ContextTimeoutEnabled: true,
			MaxRetries:            3,
			DialerRetries:         1,
			DialTimeout:           time.Second,
		}), nil
	case r.SentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            r.SentinelMaster,
			SentinelAddrs:         splitAddrs(r.Sentinels),
			SentinelUsername:      r.SentinelUsername,
			SentinelPassword:      r.SentinelPassword,
			Username:              r.Username,
			Password:              r.Password,
			DB:                    r.DB,
			TLSConfig:             tlsConfig,
			ContextTimeoutEnabled: true,
			MaxRetries:            3,
			DialerRetries:         1,
			DialTimeout:           time.Second,
		}), nil
	case st.RedisURL != "":
		opts, err := RedisClientOptions(st.RedisURL)
		if err != nil {
			return nil, err
		}
		return redis.NewClient(opts), nil
	}
	return nil, errors.New("no redis named: set a url, a cluster or a sentinel")
}

// splitAddrs splits a comma-separated address list, as State keeps it.
func splitAddrs(s string) []string {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
