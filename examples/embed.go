package examples

import _ "embed"

//go:embed policy.yaml
var policyYAML []byte

// Policy returns the example policy (examples/policy.yaml) that puts both
// backends behind toolgate; `toolgate demo` runs it.
func Policy() []byte {
	return append([]byte(nil), policyYAML...)
}
