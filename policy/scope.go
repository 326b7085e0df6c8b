package policy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
)

// Identity scopes: two end users behind one caller who send the same key
// and arguments are two actions at a backend that authenticates each of
// them (forward_headers: [Authorization]), so they must not share an
// idempotency record. A call's forwarded identity therefore scopes its key
// (IdempotencyKey.Scope) as its caller and tool do.
//
// The scope is an HMAC-SHA256, under a scope key, of the identifying
// headers the call forwards: never the values themselves, so no store, log
// or Redis dump holds a credential, and a store's reader cannot test
// guesses of a weak credential against it without the key. The key must be
// the same wherever a store is shared, or a retry that lands on another
// replica would find no record and run again. It is state.scope_key when
// the policy sets one; otherwise the store's own (IdempotencyStore.ScopeKey):
// a random key per process for the memory store, whose records live no
// longer than the process, and for the Redis store one random key that the
// first replica creates in Redis and every replica reads (see redisstate.Store).

// MinScopeKeyLen is the shortest state.scope_key accepted, in bytes: 32
// hex digits are 128 bits.
const MinScopeKeyLen = 32

// scopeKeyLen is the length in bytes of a scope key a store draws itself.
const scopeKeyLen = 32

// AlwaysIdentifying reports whether a forwarded header always carries an
// identity, whatever the policy says: a credential or a session.
func AlwaysIdentifying(name string) bool {
	switch name {
	case "Authorization", "Cookie", "Proxy-Authorization":
		return true
	}
	return false
}

// IdentityScope returns the scope that the identifying headers names (the
// canonical names an upstream forwards, in the policy's order) give a call
// whose agent sent header h: the hex HMAC-SHA256 under key of each header
// the agent sent, its name and every value, length-prefixed so that no two
// different sets of headers hash alike. It is "" when the agent sent none
// of them: then the backend sees no identity either, and the key is scoped
// by caller and tool only, as before identity scopes existed.
//
// The values are read as the backend request copies them
// (upstream.forward): h[name], by canonical name.
func IdentityScope(key []byte, names []string, h http.Header) string {
	var mac hash.Hash
	for _, name := range names {
		values, ok := h[name]
		if !ok {
			continue
		}
		if mac == nil {
			mac = hmac.New(sha256.New, key)
		}
		writeScopePart(mac, len(values), name)
		for _, v := range values {
			writeScopePart(mac, len(v), v)
		}
	}
	if mac == nil {
		return ""
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(mac.Sum(sum[:0]))
}

// writeScopePart writes n as a varint, then s.
func writeScopePart(w hash.Hash, n int, s string) {
	var b [binary.MaxVarintLen64]byte
	w.Write(b[:binary.PutUvarint(b[:], uint64(n))])
	w.Write([]byte(s))
}

// NewScopeKey draws a random scope key, in hex (so that it reads as text
// in redis-cli).
func NewScopeKey() string {
	var b [scopeKeyLen]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
