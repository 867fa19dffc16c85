package auth

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
)

// A verified token is remembered, but only as what it is: it still expires,
// and any other string, however close, is verified afresh.
func TestVerifyRemembersTokensUntilTheyExpire(t *testing.T) {
	s := NewSigner("a-secret-long-enough-for-hs256-0123456789")
	clock := time.Now()
	s.now = func() time.Time { return clock }
	tok, err := s.Issue("42", domain.RoleUser, clock, 10*time.Second)
	require.NoError(t, err)

	for range 2 { // verified, then remembered
		p, err := s.Verify(tok)
		require.NoError(t, err)
		require.Equal(t, Principal{UserID: "42", Role: domain.RoleUser}, p)
	}
	_, ok := s.verified.Get(tok)
	require.True(t, ok)

	i := len(tok) - 10 // inside the signature
	swap := map[bool]string{true: "B", false: "A"}[tok[i] == 'A']
	tampered := tok[:i] + swap + tok[i+1:]
	_, err = s.Verify(tampered)
	require.Error(t, err, "a changed signature")
	_, err = NewSigner("another-secret-long-enough-for-hs256-0123").Verify(tok)
	require.Error(t, err, "another secret")

	clock = clock.Add(10*time.Second + Leeway - time.Second)
	_, err = s.Verify(tok)
	require.NoError(t, err, "within the Leeway")
	clock = clock.Add(2 * time.Second)
	_, err = s.Verify(tok)
	require.Error(t, err, "expired, although remembered")
}

// Fiber hands handlers header values whose bytes it reuses for the next
// request. Verify must remember a copy: remembering the caller's string
// would let the next token written into the same buffer be taken for the
// one verified before it, with that caller's identity.
func TestVerifyKeepsItsOwnCopyOfTheToken(t *testing.T) {
	s := NewSigner("a-secret-long-enough-for-hs256-0123456789")
	now := time.Now()
	bob, err := s.Issue("bob", domain.RoleUser, now, time.Hour)
	require.NoError(t, err)
	staff, err := s.Issue("st", domain.RoleStaff, now, time.Hour)
	require.NoError(t, err)
	require.Len(t, staff, len(bob))

	buf := []byte(bob)
	p, err := s.Verify(unsafe.String(&buf[0], len(buf)))
	require.NoError(t, err)
	require.Equal(t, "bob", p.UserID)
	copy(buf, staff) // the next request in the same buffer
	p, err = s.Verify(unsafe.String(&buf[0], len(buf)))
	require.NoError(t, err)
	require.Equal(t, Principal{UserID: "st", Role: domain.RoleStaff}, p)
}

// A ticket opens one path for its holder, expires, and never passes as a
// bearer token; a bearer token never passes as a ticket.
func TestTicketOpensOnePathOnly(t *testing.T) {
	s := NewSigner("a-secret-long-enough-for-hs256-0123456789")
	clock := time.Now()
	s.now = func() time.Time { return clock }
	ann := Principal{UserID: "ann", Role: domain.RoleUser}
	tk, err := s.IssueTicket(ann, "/api/v1/events/7/queue/stream", "t1", clock, time.Minute)
	require.NoError(t, err)

	got, err := s.VerifyTicket(tk, "/api/v1/events/7/queue/stream")
	require.NoError(t, err)
	require.Equal(t, ann, got.Principal)
	require.Equal(t, "t1", got.ID)

	_, err = s.VerifyTicket(tk, "/api/v1/events/8/queue/stream")
	require.Error(t, err, "another event's stream")
	_, err = s.Verify(tk)
	require.Error(t, err, "a ticket is no bearer token")
	bearer, err := s.Issue("ann", domain.RoleUser, clock, time.Hour)
	require.NoError(t, err)
	_, err = s.VerifyTicket(bearer, "/api/v1/events/7/queue/stream")
	require.Error(t, err, "a bearer token is no ticket")
	_, err = NewSigner("another-secret-long-enough-for-hs256-0123").VerifyTicket(tk, "/api/v1/events/7/queue/stream")
	require.Error(t, err, "forged: another secret")

	clock = clock.Add(time.Minute + Leeway + time.Second)
	_, err = s.VerifyTicket(tk, "/api/v1/events/7/queue/stream")
	require.Error(t, err, "expired")
}

// During a secret rotation (JWT_SECRET_PREVIOUS) tokens and tickets signed
// with the previous secret are accepted, new ones are signed with the new
// secret only, and a token of any other secret is refused. Control: without
// the previous secret, its tokens are refused.
func TestRotationAcceptsThePreviousSecretUntilRemoved(t *testing.T) {
	const old, cur = "the-previous-secret-long-enough-0123456789", "the-current-secret-long-enough-0123456789"
	now := time.Now()
	oldTok, err := NewSigner(old).Issue("7", domain.RoleUser, now, time.Hour)
	require.NoError(t, err)
	oldTicket, err := NewSigner(old).IssueTicket(Principal{UserID: "7", Role: domain.RoleUser}, "/x", "t1", now, time.Minute)
	require.NoError(t, err)

	rotating := NewSigner(cur).AlsoVerifying(old)
	p, err := rotating.Verify(oldTok)
	require.NoError(t, err, "a token signed before the rotation")
	require.Equal(t, "7", p.UserID)
	_, err = rotating.VerifyTicket(oldTicket, "/x")
	require.NoError(t, err, "a ticket signed before the rotation")

	newTok, err := rotating.Issue("8", domain.RoleUser, now, time.Hour)
	require.NoError(t, err)
	_, err = NewSigner(cur).Verify(newTok)
	require.NoError(t, err, "new tokens are signed with the new secret")
	_, err = NewSigner(old).Verify(newTok)
	require.Error(t, err, "and not with the previous one")

	otherTok, err := NewSigner("a-third-secret-nobody-configured-0123456789").Issue("9", domain.RoleAdmin, now, time.Hour)
	require.NoError(t, err)
	_, err = rotating.Verify(otherTok)
	require.Error(t, err, "a token of any other secret")

	_, err = NewSigner(cur).Verify(oldTok)
	require.Error(t, err, "the control: once the previous secret is removed, its tokens are refused")
	_, err = NewSigner(cur).AlsoVerifying("").Verify(oldTok)
	require.Error(t, err, "an empty previous secret accepts nothing more")
}
