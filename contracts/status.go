// Package contracts holds what a tool call promises its caller: the closed set
// of statuses, the result envelope and its observation string, and the
// compiled tool contract (argument schema, request binding, CEL response rules,
// message templates) together with the default classification table that
// turns a backend's answer or a transport failure into a status.
//
// Everything here is compiled once when a policy is loaded; per call, only the
// arguments and the backend's answer are parsed. The package imports nothing
// else of toolgate.
package contracts

import "strings"

// Status is the outcome class of a tool call. The set is closed: a caller can
// switch over it exhaustively.
type Status string

// The statuses, in the order DESIGN.md lists them.
const (
	StatusOK        Status = "ok"
	StatusEmpty     Status = "empty"
	StatusBadArgs   Status = "bad_args"
	StatusForbidden Status = "forbidden"
	StatusNotFound  Status = "not_found"
	StatusTimeout   Status = "timeout"
	StatusUpstream  Status = "upstream"
)

// NumStatuses is the number of statuses.
const NumStatuses = 7

// statusOrder is the one order of the statuses: Statuses lists it and
// Status.Index numbers it. Its array type makes a status added here
// without NumStatuses growing fail to compile; TestStatusOrder fails on
// NumStatuses grown without a status.
func statusOrder() [NumStatuses]Status {
	return [NumStatuses]Status{StatusOK, StatusEmpty, StatusBadArgs, StatusForbidden, StatusNotFound, StatusTimeout, StatusUpstream}
}

// Statuses returns every status, in a stable order: the order DESIGN.md
// lists them in.
func Statuses() []Status {
	order := statusOrder()
	return order[:]
}

// Index returns s's place in Statuses, from 0 to NumStatuses-1, so that
// per-status values can be kept in an array of NumStatuses; false when s
// is not a status.
func (s Status) Index() (int, bool) {
	for i, st := range statusOrder() {
		if st == s {
			return i, true
		}
	}
	return 0, false
}

// parseStatus returns the status named s, or false when s is not one.
func parseStatus(s string) (Status, bool) {
	if _, ok := Status(s).Index(); ok {
		return Status(s), true
	}
	return "", false
}

// Success reports whether the call did what was asked (ok or empty).
func (s Status) Success() bool { return s == StatusOK || s == StatusEmpty }

// Tag is the status in upper case inside brackets, the observation's prefix.
func (s Status) Tag() string { return "[" + strings.ToUpper(string(s)) + "]" }

// SideEffect says whether the call changed anything at the backend.
type SideEffect string

// The side-effect values of the envelope.
const (
	SideEffectNone    SideEffect = "none"
	SideEffectDone    SideEffect = "done"
	SideEffectUnknown SideEffect = "unknown"
)

// ParseSideEffect returns the side effect named s, or false.
func ParseSideEffect(s string) (SideEffect, bool) {
	switch SideEffect(s) {
	case SideEffectNone, SideEffectDone, SideEffectUnknown:
		return SideEffect(s), true
	}
	return "", false
}
