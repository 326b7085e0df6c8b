// Package redisstate keeps toolgate's shared state in Redis: the
// idempotency store (Store), the cost budgets (Budgets) and the rate limits
// (RateLimiters), each implementing the interface package policy defines
// for it (policy.IdempotencyStore, policy.BudgetStore, policy.RateLimiter),
// and the client they share (NewClient: a single server, a Cluster or a
// Sentinel's primary). It is the only shipped package that imports
// go-redis, so no other package of the sidecar, and no other command,
// carries it; the wiring that picks the memory or the Redis state for a
// policy's state section is the toolgate command's (newRedisState).
//
// Every store passes the same conformance suite as the memory one in
// policy (internal/testkit/statetest). What each promises across replicas,
// lost replies and failovers is on its type.
package redisstate
