package domain

import "fmt"

// Role is what a caller may do, from the JWT `role` claim.
type Role string

// The roles of SPEC §2.
const (
	RoleUser  Role = "user"
	RoleStaff Role = "staff"
	RoleAdmin Role = "admin"
)

// ParseRole validates a role claim.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleUser, RoleStaff, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q", s)
}

// Privileged reports whether the role may act for other users.
func (r Role) Privileged() bool { return r == RoleStaff || r == RoleAdmin }

// Status is where an accepted request is in its lifecycle.
type Status string

// Request statuses. Succeeded, Rejected and Failed are terminal.
const (
	StatusQueued     Status = "queued"
	StatusProcessing Status = "processing"
	StatusSucceeded  Status = "succeeded"
	StatusRejected   Status = "rejected"
	StatusFailed     Status = "failed"
)

// Terminal reports whether no further change will happen to the request.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusRejected || s == StatusFailed
}
