// Package testkit is the home of the test kits, and holds nothing itself.
// Its packages are test support only, as their path says (grpc-go keeps
// its kits under internal/testutils for the same reason):
//
//   - coretest serves a proxy.Core's agent port on a loopback test server;
//   - proxytest holds what the tests of the fronts share (backends, policies);
//   - mcptest serves the example policy over MCP and checks the Go SDK
//     client's results;
//   - clienttest is the conformance suite of the upstream clients, and its
//     raw TCP backend;
//   - redacttest is the encodings a backend may echo a secret in;
//   - policytest writes policy files the ways real writers do;
//   - redistest runs redis-server, Cluster and Sentinel topologies, and a
//     fault proxy;
//   - statetest is the conformance suites of policy's state stores, which
//     the memory and the Redis stores both pass;
//   - sidecartest checks an injected toolgate sidecar;
//   - goroottest holds the copies of standard-library packages to the
//     GOROOT sources they were made from.
//
// Only tests import them, and they may import any package of the module:
// they stand outside the package order of docs/design.md.
// TestOnlyTestsImportTheKits keeps shipped code off them.
package testkit
