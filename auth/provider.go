package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/holdfast/holdfast/domain"
)

// ProviderAlgorithms are the signatures a Provider accepts: asymmetric
// only, so a token signed with HMAC (say, with the provider's public key as
// the secret) is refused before any key is looked up.
var ProviderAlgorithms = []string{"RS256", "PS256", "ES256", "ES384"}

// DefaultFetchTimeout is ProviderOptions.FetchTimeout unless set.
const DefaultFetchTimeout = 5 * time.Second

// ErrKeysUnavailable is returned while a Provider has never fetched its
// key set: it cannot tell a good token from a bad one, so the caller is
// told to retry, not that its token is bad.
var ErrKeysUnavailable = errors.New("the identity provider's keys have not been fetched yet")

// ProviderOptions configure a Provider; config.Config's JWT_JWKS_* and
// JWT_* settings fill them.
type ProviderOptions struct {
	JWKSURL  string // where the provider publishes its keys
	Issuer   string // the `iss` every token must carry
	Audience string // a value the token's `aud` must contain
	// RoleClaim names the claim that carries the role: a top-level name,
	// or a dotted path into nested objects (realm_access.roles).
	RoleClaim string
	// RefreshInterval is how often the key set is fetched in the
	// background, to learn of new keys and of removed ones.
	RefreshInterval time.Duration
	// MinRefreshInterval is the least time between two fetches triggered
	// by tokens whose `kid` is not in the key set, so that forged kids
	// cannot make the API hammer the provider.
	MinRefreshInterval time.Duration
	// FetchTimeout bounds one fetch of the key set, and so how long a
	// token with an unknown `kid` may wait for the refresh it triggers;
	// 0 is DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Client fetches the key set; nil uses http.DefaultClient.
	Client *http.Client
	Log    *slog.Logger
}

// Provider verifies bearer tokens signed by an identity provider (Keycloak,
// Auth0, Cognito, Entra ID) with the keys it publishes at a JWKS URL. It
// accepts only ProviderAlgorithms, so HS256 tokens, holdfast's own
// included, are refused. Keys are picked by the token's `kid`, refreshed
// every RefreshInterval, and fetched at once when a token names a kid the
// set does not hold, at most once per MinRefreshInterval.
type Provider struct {
	opts   ProviderOptions
	parser *jwt.Parser
	now    func() time.Time
	keys   atomic.Pointer[keySet] // nil until the key set is first fetched

	mu      sync.Mutex
	lastErr error // why the last fetch of a key set not yet had failed

	verified verifiedTokens
}

// keySet is the provider's key set as fetched, kept fresh by the library
// until stop is called or the Provider's context ends.
type keySet struct {
	keyfunc jwt.Keyfunc
	stop    context.CancelFunc
}

// NewProvider fetches the key set at o.JWKSURL, waiting at most
// o.FetchTimeout. Should that fail, it returns a Provider anyway, which
// answers ErrKeysUnavailable (and Ready an error) while it fetches again
// in the background, one second after the failure and then less and less
// often, down to once per MinRefreshInterval, until it succeeds. Its work
// ends with ctx.
func NewProvider(ctx context.Context, o ProviderOptions) (*Provider, error) {
	if o.JWKSURL == "" || o.Issuer == "" || o.Audience == "" || o.RoleClaim == "" {
		return nil, errors.New("auth: a provider needs a JWKS URL, an issuer, an audience and a role claim")
	}
	if o.RefreshInterval <= 0 || o.MinRefreshInterval <= 0 {
		return nil, errors.New("auth: a provider's refresh intervals must be positive")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	p := &Provider{opts: o, now: time.Now, verified: newVerifiedTokens()}
	p.parser = jwt.NewParser(
		jwt.WithValidMethods(ProviderAlgorithms),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(Leeway),
		jwt.WithIssuer(o.Issuer),
		jwt.WithAudience(o.Audience),
		jwt.WithTimeFunc(func() time.Time { return p.now() }),
	)
	if err := p.fetch(ctx); err != nil {
		p.fetchFailed(err)
		go p.fetchUntilLoaded(ctx)
	}
	return p, nil
}

// fetch makes one attempt at the key set; on success the library keeps it
// fresh from then on.
func (p *Provider) fetch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	noKeysIsAnError := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{p.opts.JWKSURL}, keyfunc.Override{
		Client:                    p.opts.Client,
		HTTPTimeout:               p.opts.FetchTimeout,
		NoErrorReturnFirstHTTPReq: &noKeysIsAnError,
		// It bounds a token's wait for the limiter and for the refresh
		// its unknown kid triggers: a limiter that would make it wait
		// longer refuses at once.
		RateLimitWaitMax:        p.opts.FetchTimeout,
		RefreshErrorHandlerFunc: p.logRefreshError,
		RefreshInterval:         p.opts.RefreshInterval,
		RefreshUnknownKID:       rate.NewLimiter(rate.Every(p.opts.MinRefreshInterval), 1),
	})
	if err != nil {
		cancel() // ends the background refresh the attempt started
		return err
	}
	// A key published for encryption never verifies a signature.
	kf, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: kf.Storage(), UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	if err != nil {
		cancel()
		return err
	}
	p.keys.Store(&keySet{keyfunc: kf.Keyfunc, stop: cancel})
	p.opts.Log.Info("identity provider keys fetched", "url", p.opts.JWKSURL)
	return nil
}

// fetchUntilLoaded tries again, waiting twice as long after each failure,
// from a second up to MinRefreshInterval, until the key set is fetched or
// ctx ends.
func (p *Provider) fetchUntilLoaded(ctx context.Context) {
	wait := min(time.Second, p.opts.MinRefreshInterval)
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := p.fetch(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		p.fetchFailed(err)
		wait = min(2*wait, p.opts.MinRefreshInterval)
	}
}

func (p *Provider) fetchFailed(err error) {
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
	p.opts.Log.Warn("identity provider keys: cannot fetch them; bearer tokens are answered 503 until they are", "url", p.opts.JWKSURL, "err", err)
}

func (p *Provider) logRefreshError(url string) func(context.Context, error) {
	return func(ctx context.Context, err error) {
		if errors.Is(ctx.Err(), context.Canceled) { // the API is stopping
			return
		}
		p.opts.Log.WarnContext(ctx, "identity provider keys: refresh failed; the keys fetched before stay in use", "url", url, "err", err)
	}
}

// Ready reports an error until the key set has been fetched once; from
// then on the keys fetched last stay in use whatever later fetches do.
func (p *Provider) Ready() error {
	if p.keys.Load() != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("auth: %w from %s: %w", ErrKeysUnavailable, p.opts.JWKSURL, p.lastErr)
}

// Verify checks a token signed by the provider and returns its principal:
// `sub` is the user id, the role comes from the RoleClaim (roleFrom).
func (p *Provider) Verify(token string) (Principal, error) {
	if pr, ok := p.verified.principal(token, p.now()); ok {
		return pr, nil
	}
	keys := p.keys.Load()
	if keys == nil {
		return Principal{}, fmt.Errorf("auth: %w", ErrKeysUnavailable)
	}
	c := jwt.MapClaims{}
	if _, err := p.parser.ParseWithClaims(token, c, keys.keyfunc); err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	sub, err := c.GetSubject()
	if err != nil || sub == "" {
		return Principal{}, errors.New("auth: token has no subject")
	}
	role, err := roleFrom(c, p.opts.RoleClaim)
	if err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	exp, err := c.GetExpirationTime()
	if err != nil || exp == nil { // the parser requires it: never happens
		return Principal{}, errors.New("auth: token has no expiry")
	}
	pr := Principal{UserID: sub, Role: role}
	p.verified.remember(token, pr, exp.Time)
	return pr, nil
}

// mostPrivilegedFirst orders the roles a claim may name.
var mostPrivilegedFirst = []domain.Role{domain.RoleAdmin, domain.RoleStaff, domain.RoleUser}

// roleFrom reads the role claim named by path: first as one top-level
// name (so a namespaced claim such as https://holdfast.example/role is
// found whole), else as a dotted path through nested objects
// (realm_access.roles). A string names one role; an array of strings
// gives the most privileged role holdfast knows among them, names it does
// not know ignored (a provider lists many roles of its own). A token with
// no role holdfast knows is refused.
func roleFrom(c map[string]any, path string) (domain.Role, error) {
	v, ok := c[path]
	if !ok {
		v, ok = claimAt(c, strings.Split(path, "."))
	}
	var names []string
	switch v := v.(type) {
	case string:
		names = []string{v}
	case []any:
		for _, n := range v {
			if s, ok := n.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, r := range mostPrivilegedFirst {
		if slices.Contains(names, string(r)) {
			return r, nil
		}
	}
	if !ok {
		return "", fmt.Errorf("token has no %s claim", path)
	}
	return "", fmt.Errorf("the %s claim names no holdfast role (user, staff, admin)", path)
}

// claimAt walks nested objects along path.
func claimAt(c map[string]any, path []string) (any, bool) {
	var v any = c
	for _, name := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[name]; !ok {
			return nil, false
		}
	}
	return v, true
}
