package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/apispec"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
)

// pageProxy stands between the browser and the API. It checks every answer
// a page gets against the OpenAPI document, and records any request the
// document does not describe; it can be pointed at another API (a
// restart), and while none answers it says 502, as a load balancer would.
type pageProxy struct {
	URL    string
	doc    *apispec.Document
	mu     sync.Mutex
	target *url.URL
	bad    []string
	calls  int
	recent []string // the last exchanges, "GET /path → 200", logged when the test fails
}

// lastKept bounds what a page proxy and a tab keep for a failed test's log.
const lastKept = 40

// keepLast appends line to lines, keeping the last lastKept.
func keepLast(lines []string, line string) []string {
	lines = append(lines, line)
	if len(lines) > lastKept {
		lines = lines[len(lines)-lastKept:]
	}
	return lines
}

func newPageProxy(t *testing.T, api string) *pageProxy {
	t.Helper()
	doc, err := apispec.Load()
	require.NoError(t, err)
	p := &pageProxy{doc: doc}
	p.point(t, api)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			r.SetURL(target)
		},
		FlushInterval:  -1,
		ModifyResponse: p.check,
		ErrorHandler:   func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Logf("the pages' last %d API exchanges:\n%s", len(p.recent), strings.Join(p.recent, "\n"))
		}
	})
	p.URL = srv.URL
	return p
}

// point sends the proxy's requests to the API at api from now on.
func (p *pageProxy) point(t *testing.T, api string) {
	u, err := url.Parse(api)
	require.NoError(t, err)
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
}

func (p *pageProxy) check(resp *http.Response) error {
	req := resp.Request
	uri := req.URL.RequestURI()
	var body []byte
	if !apispec.IsEventStream(resp.Header) {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		body = b
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if !strings.HasPrefix(uri, "/api/") {
		body = nil // a page or an asset: its status says enough
	}
	p.recent = keepLast(p.recent, fmt.Sprintf("%s %s %.120s → %d %.200s", time.Now().Format("15:04:05.000"), req.Method, uri, resp.StatusCode, body))
	if !p.doc.Describes(req.Method, uri) {
		p.bad = append(p.bad, fmt.Sprintf("%s %s is not in the OpenAPI document", req.Method, uri))
	} else if err := p.doc.Check(req.Method, uri, resp.StatusCode, resp.Header, body); err != nil {
		p.bad = append(p.bad, err.Error())
	}
	return nil
}

// described fails the test if a page sent a request the document does not
// describe or got an answer that does not match it.
func (p *pageProxy) described(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Positive(t, p.calls)
	require.Empty(t, p.bad)
}

// browser starts a headless Chromium for the test and returns its context;
// each chromedp.NewContext of it is a tab of its own (own sessionStorage).
func browser(t *testing.T) context.Context {
	t.Helper()
	// One Chromium at a time on this machine: four beside the rest of the
	// suite on two cores kept pages from loading for tens of seconds.
	testenv.Slot(t, "browser", 1)
	path, err := exec.LookPath("chromium")
	require.NoError(t, err, "no chromium: apt-get install chromium (.ci/run does)")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(420, 900),
		chromedp.Flag("ignore-certificate-errors", true)) // posterServer's certificate is the test's own
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	return ctx
}

// tab is one browser tab on a page, with the test's helpers.
type tab struct {
	t       *testing.T
	name    string
	ctx     context.Context
	close   context.CancelFunc
	shots   string // directory for screenshots
	nshots  int
	mu      sync.Mutex
	console []string // the page's last console messages and exceptions, logged when the test fails
}

func openTab(t *testing.T, b context.Context, name, url string) *tab {
	t.Helper()
	return openTabWith(t, b, name, url, "")
}

// openTabWith is openTab with a script that runs before the page's own
// (noEventSource takes EventSource away, as some browsers and proxies do).
func openTabWith(t *testing.T, b context.Context, name, url, before string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	dir := os.Getenv("HOLDFAST_SCREENSHOTS") // keep them (docs/screenshots was made so)
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "screenshots")
	}
	tb := &tab{t: t, name: name, ctx: ctx, close: cancel, shots: dir}
	t.Cleanup(cancel)
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = keepLast(tb.console, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.000"), m.Type, m.Text))
			tb.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			t.Logf("tab %s: the page's last %d console messages:\n%s", name, len(tb.console), strings.Join(tb.console, "\n"))
		}
	})
	require.NoError(t, os.MkdirAll(tb.shots, 0o755))
	if before != "" {
		require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := cdp.Call(ctx, target, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: before})
			return err
		})))
	}
	// A phone's screen: headless Chromium's windows are at least 500
	// pixels wide, so each tab is given a phone's viewport. Reduced motion
	// keeps a screenshot from catching the progress bar mid-animation.
	reduced := chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		_, err := cdp.Call(ctx, target, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}}})
		return err
	})
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), reduced, chromedp.Navigate(url)))
	return tb
}

// noEventSource is a script that takes EventSource away from a page.
const noEventSource = `delete window.EventSource;`

// text is the text of the element with id, or "" while the tab is between
// two documents (a click that navigates, as the waiting room's does when it
// is the user's turn).
func (tb *tab) text(id string) string {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](
		fmt.Sprintf(`(document.getElementById(%q) || {}).textContent || ""`, id)))
	if navigating(err) {
		return ""
	}
	require.NoError(tb.t, err)
	return s
}

// navigating reports whether err is the DevTools protocol's answer to a
// script evaluated while its document was being replaced.
func navigating(err error) bool {
	var cerr *cdproto.Error
	return errors.As(err, &cerr) && cerr.Code == -32000 &&
		(cerr.Message == "Inspected target navigated or closed" || cerr.Message == "Execution context was destroyed.")
}

// waitFor waits until the element with id says want, and returns its text.
// A failure names what the element said last (the message of the last try).
func (tb *tab) waitFor(id, want string, within time.Duration) string {
	tb.t.Helper()
	var got string
	require.EventuallyWithT(tb.t, func(c *assert.CollectT) {
		got = tb.text(id)
		assert.Contains(c, got, want, "%s: #%s", tb.name, id)
	}, within, 50*time.Millisecond)
	return got
}

// click clicks the element the CSS selector names.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.Click(chromedp.CSS(sel))))
}

// shot saves a screenshot of the tab as <name>-<n>-<state>.png.
func (tb *tab) shot(state string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	require.NoError(tb.t, err)
	tb.nshots++
	require.NoError(tb.t, os.WriteFile(filepath.Join(tb.shots, fmt.Sprintf("%s-%d-%s.png", tb.name, tb.nshots, state)), png, 0o644))
}

// axeSource is axe-core's script, installed by make test (npm ci in
// e2e/browser).
func axeSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("browser", "node_modules", "axe-core", "axe.min.js"))
	require.NoError(t, err, "axe-core is missing: npm ci --prefix e2e/browser (make test does)")
	return string(b)
}

// accessible runs axe-core in the tab's page as it is now and fails on any
// serious or critical violation. DevTools evaluates the script, so the
// page's Content-Security-Policy stays as strict as it is.
func (tb *tab) accessible(axe, state string) {
	tb.t.Helper()
	_, err := chromedp.Run(tb.ctx, chromedp.Evaluate[*runtime.RemoteObject](axe))
	require.NoError(tb.t, err)
	found, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations
		.filter(v => v.impact === "serious" || v.impact === "critical")
		.map(v => v.id + " (" + v.impact + "): " + v.help + " — " + v.nodes.map(n => n.target.join(" ")).join(", ")))`,
		chromedp.EvalAwaitPromise))
	require.NoError(tb.t, err)
	require.Empty(tb.t, found, "%s, %s: axe-core found serious or critical violations", tb.name, state)
}

// typeInto types text into the field the CSS selector names.
func (tb *tab) typeInto(sel, text string) {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.SendKeys(chromedp.CSS(sel), text)))
}

// buy holds the seat the selector names on the seat page and confirms it
// with a payment reference; it returns what the page then says.
func (tb *tab) buy(sel, label, payment string) string {
	tb.t.Helper()
	tb.click(sel)
	tb.waitFor("state", "Seat "+label+" is held for you.", 20*time.Second)
	tb.typeInto("#payment-ref", payment)
	tb.click("#confirm")
	return tb.waitFor("state", "Booked: seat "+label+" is yours.", 20*time.Second)
}

// evaluate evaluates a script in the tab's page and returns its value.
func evaluate[T any](tb *tab, script string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](script))
	require.NoError(tb.t, err)
	return v
}

// posterServer serves an event's image over https, as an operator's own
// host would, and records the Referer of each request for it.
type posterServer struct {
	URL      string
	mu       sync.Mutex
	referers []string
}

func newPosterServer(t *testing.T) *posterServer {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 780, 320))
	for x := range 780 {
		for y := range 320 {
			img.Set(x, y, color.RGBA{R: uint8(29 + x/8), G: uint8(53 + y/4), B: 87 + uint8(x/12), A: 255})
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	p := &posterServer{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.referers = append(p.referers, r.Header.Get("Referer"))
		p.mu.Unlock()
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(b.Bytes())
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/poster.png"
	return p
}

// requested reports the Referer headers the image was asked for with.
func (p *posterServer) requested() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.referers...)
}

// imageState is the event image's state in a tab: "" until the page has
// asked for it, then "loading", "shown" or "hidden" (it did not load).
const imageState = `(i => !i.getAttribute("src") ? "" : !i.complete ? "loading" :
	(i.naturalWidth > 0 && !i.hidden ? "shown" : i.hidden ? "hidden" : "broken"))(document.getElementById("event-image"))`

// eventShown checks that the page shows the event's start, venue and
// image (whose alt text is the event's name), the image asked for with no
// Referer.
func eventShown(t *testing.T, tb *tab, startsAt, venue string, poster *posterServer) {
	t.Helper()
	tb.waitFor("event-venue", venue, 20*time.Second)
	require.Equal(t, startsAt, evaluate[string](tb, `document.getElementById("event-when").dateTime`))
	require.Contains(t, tb.text("event-when"), startsAt[:4], "the date names its year")
	require.Eventually(t, func() bool { return evaluate[string](tb, imageState) == "shown" }, 20*time.Second, 50*time.Millisecond,
		"%s: the event's image never showed", tb.name)
	require.Equal(t, "Spring concert", evaluate[string](tb, `document.getElementById("event-image").alt`))
	require.NotEmpty(t, poster.requested())
	for _, ref := range poster.requested() {
		require.Empty(t, ref, "the image is asked for with no Referer")
	}
}

// etaFormat checks the page's wording of an estimated wait (common.js
// eta): what a person would say, its numbers never parted from their
// units at a line break.
func etaFormat(t *testing.T, tb *tab) {
	t.Helper()
	cases := []struct {
		seconds float64
		want    string
	}{
		{0, "less than a minute"}, {59, "less than a minute"}, {60, "about 1 minute"}, {89, "about 1 minute"},
		{90, "about 2 minutes"}, {120, "about 2 minutes"}, {3569, "about 59 minutes"}, {3599, "about 1 hour"},
		{3600, "about 1 hour"}, {4200, "about 1 hour 10 minutes"}, {4350, "about 1 hour 15 minutes"},
		{7260, "about 2 hours"}, {90000, "about 25 hours"},
	}
	for _, c := range cases {
		got := evaluate[string](tb, fmt.Sprintf(`holdfast.eta(%v)`, c.seconds))
		require.Equal(t, c.want, strings.ReplaceAll(got, "\u00a0", " "), "eta(%v)", c.seconds)
		require.NotRegexp(t, `[0-9] |about `, got, "eta(%v): a number or 'about' can be parted from what follows", c.seconds)
	}
	for s, want := range map[float64]string{120: "2 min", 100: "1 min 40 s", 12: "12 s", 3900: "1 h 5 min", 0: "0 s"} {
		require.Equal(t, want, strings.ReplaceAll(evaluate[string](tb, fmt.Sprintf(`holdfast.duration(%v)`, s)), "\u00a0", " "))
	}
}

// createRoomEvent makes an event behind a waiting room and returns its id.
func createRoomEvent(t *testing.T, admin *systest.Client, settings string) int64 {
	t.Helper()
	r := admin.Do("POST", "/api/v1/events", `{"name":"Spring concert","seatCount":6,`+settings+`}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var e struct {
		EventID int64 `json:"eventId"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &e))
	return e.EventID
}

// Four people queue in real browsers for an event with maxConcurrent 1,
// which shows its date, venue and image. The first sees its turn, enters,
// picks a seat and sees it booked, with its booking reference; the second
// sees its place fall to the front and then its turn, without a reload;
// the third closes its tab, and once presenceTimeout has passed the
// fourth, who waited behind it, gets its turn. Meanwhile the fourth's
// progress bar moves, its wait is estimated once an admission was seen,
// and the estimate stays (marked) while admissions are paused. axe-core
// finds no serious or critical violation in any of the states.
func TestWaitingRoomPagesInABrowser(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	admin := s.Client("admin", domain.RoleAdmin)
	poster := newPosterServer(t)
	const startsAt, venue = "2026-12-12T19:30:00Z", "Town Hall, Leeds"
	id := createRoomEvent(t, admin, `"maxConcurrent":1,"presenceTimeoutSeconds":3,"claimWindowSeconds":120,
		"startsAt":"`+startsAt+`","venue":"`+venue+`","imageUrl":"`+poster.URL+`"`)
	axe := axeSource(t)
	b := browser(t)
	proxy := newPageProxy(t, s.URL)
	page := func(user string) string { return roomURL(s, proxy, id, user) }

	first := openTab(t, b, "first", page("ana"))
	first.waitFor("state", "It's your turn!", 20*time.Second)
	eventShown(t, first, startsAt, venue, poster)
	etaFormat(t, first)
	first.shot("your-turn")
	first.accessible(axe, "your turn")
	second := openTab(t, b, "second", page("ben"))
	second.waitFor("state", "You are number 2 in line.", 20*time.Second)
	second.shot("waiting")
	second.accessible(axe, "waiting")
	third := openTab(t, b, "third", page("cho"))
	third.waitFor("state", "You are number 3 in line.", 20*time.Second)
	fourth := openTab(t, b, "fourth", page("dan"))
	fourth.waitFor("state", "You are number 4 in line.", 20*time.Second)
	require.Equal(t, "not yet known", fourth.text("eta"), "nobody admitted yet, no rate set")
	progress := func() []float64 {
		return evaluate[[]float64](fourth, `(p => [p.value, p.max])(document.getElementById("progress"))`)
	}
	require.Equal(t, []float64{0, 4}, progress(), "three ahead, then the turn")

	third.close() // the tab is gone: no polls, no stream
	first.click("#action")
	first.waitFor("state", "free. Pick one.", 20*time.Second)
	first.shot("seats")
	first.accessible(axe, "seat list")

	// The first's admission gives the line a rate, and the first and the
	// third leave it: the fourth gets an estimate, and its bar moves.
	fourth.waitFor("state", "You are number 2 in line.", 20*time.Second)
	fourth.waitFor("eta", "about", 20*time.Second)
	require.Equal(t, []float64{2, 4}, progress())
	require.Equal(t, "You have moved up 2 places since you joined.", fourth.text("progress-note"))
	estimate := fourth.text("eta")
	fourth.shot("waiting")
	fourth.accessible(axe, "waiting with an estimate")
	// Paused, the server knows no estimate (etaSeconds null): the page
	// keeps the last one, marked as such, rather than "not yet known".
	path := fmt.Sprintf("/api/v1/events/%d", id)
	require.Equal(t, http.StatusOK, admin.Do("PATCH", path, `{"admissionPaused":true}`).Status)
	fourth.waitFor("state", "Admissions are paused.", 20*time.Second)
	require.Equal(t, estimate, fourth.text("eta"))
	require.False(t, evaluate[bool](fourth, `document.getElementById("eta-note").hidden`), "the kept estimate is not marked")
	require.Equal(t, http.StatusOK, admin.Do("PATCH", path, `{"admissionPaused":false}`).Status)
	fourth.waitFor("state", "You are number", 20*time.Second)

	first.click(`#seats button[data-seat]`)
	first.waitFor("hold-left", "left.", 20*time.Second)
	first.shot("held")
	first.accessible(axe, "held")
	first.click("#confirm")
	first.waitFor("state", "Enter the payment reference", 5*time.Second)
	first.typeInto("#payment-ref", "psp-ana-1")
	first.click("#confirm")
	booked := first.waitFor("state", "Booked: seat", 20*time.Second)
	var order int64
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id FROM seat_holds
		WHERE event_id = $1 AND user_id = 'ana' AND status = 'CONFIRMED' AND payment_reference = 'psp-ana-1'`,
		id).Scan(&order))
	ref := events.BookingReference("O", order)
	require.Contains(t, booked, "Your booking reference is "+ref+".")
	require.Equal(t, ref, first.text("booking-reference"))
	require.Contains(t, first.text("next-steps"), "quote it whenever you contact the organiser")
	require.Contains(t, first.text("next-steps"), "See you at "+venue)
	first.shot("booked")
	first.accessible(axe, "booked")
	t.Log(booked)

	second.waitFor("state", "It's your turn!", 20*time.Second) // no reload: the stream or the polls brought it
	second.click("#action")
	second.waitFor("state", "free. Pick one.", 20*time.Second)
	second.click(`#seats button[data-seat]:not([disabled])`)
	second.waitFor("hold-left", "left.", 20*time.Second)
	second.typeInto("#payment-ref", "psp-ben-1")
	second.click("#confirm")
	second.waitFor("state", "Booked: seat", 20*time.Second)

	fourth.waitFor("state", "It's your turn!", 30*time.Second) // the third lost its place
	fourth.shot("your-turn")
	proxy.described(t)
}

// roomURL is user's waiting-room address for event id, through proxy.
func roomURL(s *systest.System, proxy *pageProxy, id int64, user string) string {
	return fmt.Sprintf("%s/events/%d/waiting-room#token=%s", proxy.URL, id, s.Token(user, domain.RoleUser))
}

// In the pre-queue the page counts down to the sale, then shows its place
// in line by itself once the order is drawn at salesStartAt.
func TestPrequeuePageCountsDownThenShowsThePlace(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	admin := s.Client("admin", domain.RoleAdmin)
	axe := axeSource(t)
	b := browser(t) // before the sale's clock starts: a browser may take seconds to come up
	start := time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339)
	id := createRoomEvent(t, admin, `"maxConcurrent":1,"admissionPaused":true,"salesStartAt":"`+start+`"`)
	proxy := newPageProxy(t, s.URL)
	tb := openTab(t, b, "prequeue", roomURL(s, proxy, id, "eve"))
	tb.waitFor("state", "You are in the pre-queue.", 20*time.Second)
	tb.waitFor("deadline", "The sale starts in", 5*time.Second)
	tb.shot("prequeue")
	tb.accessible(axe, "pre-queue")
	tb.waitFor("state", "Admissions are paused. You keep your place: number 1 in line.", 30*time.Second)
	tb.shot("paused")
	tb.accessible(axe, "paused")
	proxy.described(t)
}

// Two people pick the same seat: the first holds and confirms it; the
// second, whose list still showed it, is told someone was faster, gets a
// fresh list and buys another.
func TestSeatPageSomeoneWasFaster(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	admin := s.Client("admin", domain.RoleAdmin)
	// An image that does not load (nothing listens there) is left out;
	// the pages work without it.
	id := createRoomEvent(t, admin, `"maxConcurrent":2,"imageUrl":"https://127.0.0.1:1/poster.png"`)
	axe := axeSource(t)
	b := browser(t)
	proxy := newPageProxy(t, s.URL)
	one := openTab(t, b, "one", roomURL(s, proxy, id, "fay"))
	two := openTab(t, b, "two", roomURL(s, proxy, id, "gus"))
	require.Eventually(t, func() bool { return evaluate[string](one, imageState) == "hidden" }, 20*time.Second, 50*time.Millisecond,
		"the image that did not load is not left out")
	for _, tb := range []*tab{one, two} {
		tb.waitFor("state", "It's your turn!", 20*time.Second)
		tb.click("#action")
		tb.waitFor("state", "6 seats are free. Pick one.", 20*time.Second)
	}
	one.buy(`#seats button[data-seat="1"]`, "1", "psp-fay")
	two.click(`#seats button[data-seat="1"]`) // its list is from before
	two.waitFor("state", "Someone was faster: seat 1 is taken. Pick another. 5 seats are free.", 20*time.Second)
	two.shot("someone-was-faster")
	two.accessible(axe, "someone was faster")
	two.buy(`#seats button[data-seat="2"]`, "2", "psp-gus")
	proxy.described(t)
}

// A group on an event with a seat map asks for three seats together in
// the back section: the page shows them held, side by side, with the time
// left. Another fan, through the API, holds the last two seats: the event
// is sold out, and a third, waiting behind them, is told so and keeps its
// place. When the group's hold runs out (three seconds here) its page says
// so and shows the seats free again, and the periodic sweep offers them
// to the line: the third fan's page says it is its turn.
func TestSeatPageHoldsAGroupUntilItExpires(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"EVENTS_RECONCILE_INTERVAL", "1s"}})
	admin := s.Client("admin", domain.RoleAdmin)
	r := admin.Do("POST", "/api/v1/events", `{"name":"Cellar gig","maxConcurrent":1,"seatHoldSeconds":3,
		"sections":[{"name":"Front","priceTier":"A","rows":[{"label":"A","seats":2}]},
			{"name":"Back","priceTier":"B","rows":[{"label":"B","seats":3}]}]}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var e struct {
		EventID int64 `json:"eventId"`
	}
	r.JSON(t, &e)
	axe := axeSource(t)
	b := browser(t)
	proxy := newPageProxy(t, s.URL)
	group := openTab(t, b, "group", roomURL(s, proxy, e.EventID, "hal"))
	group.waitFor("state", "It's your turn!", 20*time.Second)
	jon := s.Client("jon", domain.RoleUser)
	enterRoom(t, jon, e.EventID)
	late := openTab(t, b, "late", roomURL(s, proxy, e.EventID, "ida"))
	late.waitFor("state", "You are number 3 in line.", 20*time.Second)

	group.click("#action")
	group.waitFor("state", "5 seats are free. Pick one.", 20*time.Second)
	require.NoError(t, chromedp.Do(group.ctx, chromedp.SetValue(chromedp.CSS("#quantity"), "3"),
		chromedp.SetValue(chromedp.CSS("#section"), "Back")))
	group.click("#find")
	group.waitFor("state", "Seats Back B-1, Back B-2, Back B-3 are held for you.", 20*time.Second)
	require.Equal(t, 3, evaluate[int](group, `document.querySelectorAll("#seats button.mine").length`))
	group.shot("held-together")
	group.accessible(axe, "held together")

	// hal's hold gave its entry back: jon's turn, and jon holds the rest.
	base := fmt.Sprintf("/api/v1/events/%d", e.EventID)
	var tok struct{ EntryToken string }
	require.Eventually(t, func() bool { return jon.Do("POST", base+"/queue/token", nil).Status == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	jon.Do("POST", base+"/queue/token", nil).JSON(t, &tok)
	holdResult(t, jon, jon.Do("POST", base+"/holds", map[string]any{"quantity": 2}, events.EntryTokenHeader, tok.EntryToken))
	late.waitFor("state", "Sold out for now. You keep your place, number 1 in line", 20*time.Second)
	late.accessible(axe, "sold out for now")

	group.waitFor("state", "Your hold ran out, and the seats went back on sale. 3 seats are free.", 20*time.Second)
	require.Zero(t, evaluate[int](group, `document.querySelectorAll("#seats button.mine").length`))
	group.accessible(axe, "hold ran out")
	late.waitFor("state", "It's your turn!", 20*time.Second)
	proxy.described(t)
}

// The API behind the page is stopped and another started while the page
// waits (through a proxy that answers 502 meanwhile, as a load balancer
// would): the page says it is reconnecting, then shows its place and its
// turn again without a reload. A page without EventSource polls instead.
func TestWaitingRoomPageSurvivesAnAPIRestart(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, NoAPI: true})
	apiURL, stopAPI := s.StartStoppableAPI()
	admin := s.Client("admin", domain.RoleAdmin).At(apiURL)
	id := createRoomEvent(t, admin, `"maxConcurrent":1`)
	axe := axeSource(t)
	b := browser(t)
	proxy := newPageProxy(t, apiURL)
	ahead := s.Client("hal", domain.RoleUser).At(apiURL)
	enterRoom(t, ahead, id)
	live := openTab(t, b, "live", roomURL(s, proxy, id, "ida"))
	polling := openTabWith(t, b, "polling", roomURL(s, proxy, id, "jon"), noEventSource)
	live.waitFor("state", "You are number 2 in line.", 20*time.Second)
	polling.waitFor("state", "You are number 3 in line.", 20*time.Second)
	noES, err := chromedp.Run(polling.ctx, chromedp.Evaluate[string](`typeof window.EventSource`))
	require.NoError(t, err)
	require.Equal(t, "undefined", noES, "the polling tab has EventSource")

	stopAPI()
	live.waitFor("connection", "Connection lost. Reconnecting by itself…", 20*time.Second)
	live.shot("reconnecting")
	live.accessible(axe, "reconnecting")
	apiURL, _ = s.StartStoppableAPI()
	proxy.point(t, apiURL)
	ahead = ahead.At(apiURL)
	require.Equal(t, http.StatusOK, ahead.Do("DELETE", fmt.Sprintf("/api/v1/events/%d/queue/token", id), nil).Status) // leaves the line
	live.waitFor("state", "It's your turn!", 30*time.Second)
	require.Empty(t, live.text("connection"), "the page still says it is reconnecting")
	polling.waitFor("state", "You are number 2 in line.", 30*time.Second)
	proxy.described(t)
}

// enterRoom puts c's user in event id's line and waits until it is there.
func enterRoom(t *testing.T, c *systest.Client, id int64) {
	t.Helper()
	r := c.Do("POST", fmt.Sprintf("/api/v1/events/%d/queue", id), nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(t, &a)
	require.Equal(t, domain.StatusSucceeded, c.Wait(a.RequestID, 20*time.Second).Status)
}

// The pages and their assets carry a strict CSP and cache headers fit for
// a crowd (public, short); an unknown asset and a malformed event id are
// 404 error envelopes.
func TestPagesHeaders(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""
	for path, want := range map[string]string{
		"/events/7/waiting-room":         "text/html",
		"/events/7/seats-page":           "text/html",
		"/events/assets/waiting-room.js": "text/javascript",
		"/events/assets/page.css":        "text/css",
	} {
		r := anon.Do("GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status, path)
		require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), want), "%s: %s", path, r.Header.Get("Content-Type"))
		require.Contains(t, r.Header.Get("Content-Security-Policy"), "default-src 'none'", path)
		require.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Contains(t, r.Header.Get("Content-Security-Policy"), "img-src 'self' data: https:;", path)
		require.True(t, strings.HasPrefix(r.Header.Get("Cache-Control"), "public, max-age="), path)
		require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"), path)
	}
	page := anon.Do("GET", "/events/7/waiting-room", nil)
	require.NotContains(t, string(page.Body), "<script>", "no inline script")
	require.NotContains(t, string(page.Body), "http", "nothing from other hosts")
	require.Equal(t, http.StatusNotFound, anon.Do("GET", "/events/assets/nope.js", nil).Status)
	require.Equal(t, http.StatusNotFound, anon.Do("GET", "/events/assets/..%2fpages.go", nil).Status)
	r := anon.Do("GET", "/events/x/waiting-room", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	r.ErrorCode(t)
}
