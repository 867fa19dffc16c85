package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/events/draw"
)

// verifyPrequeue recomputes an event's pre-queue order from what the API
// publishes, as anyone can: the public event (commitment and seed) and the
// list of entrants. It needs no secret and no database.
func verifyPrequeue(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("verify-prequeue", flag.ContinueOnError)
	base := fs.String("url", "http://127.0.0.1:8080", "the API's base URL")
	ev := fs.Int64("event", 0, "event id")
	user := fs.String("user", "", "a user id: print its place")
	all := fs.Bool("order", false, "print the whole admission order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ev <= 0 {
		return errors.New("verify-prequeue: -event is required")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	root := strings.TrimRight(*base, "/") + fmt.Sprintf("/api/v1/public/events/%d", *ev)
	var pub events.Public
	if err := getJSON(ctx, root, &pub); err != nil {
		return err
	}
	p := draw.Prequeue{Commitment: pub.ShuffleCommitment}
	if pub.ShuffleSeed != nil {
		p.Seed = *pub.ShuffleSeed
	}
	sealed := false
	for offset := 0; ; {
		var page events.PrequeuePage
		if err := getJSON(ctx, fmt.Sprintf("%s/prequeue?offset=%d", root, offset), &page); err != nil {
			return err
		}
		p.Entrants, sealed = append(p.Entrants, page.Entrants...), page.Sealed
		if page.NextOffset == nil {
			break
		}
		offset = *page.NextOffset
	}
	order, place, err := draw.Verify(p, *user)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "event %d: SHA-256 of the seed matches the commitment %s\n", *ev, p.Commitment)
	fmt.Fprintf(out, "%d entrants; admission order = their pseudonyms sorted ascending", len(order))
	if !sealed {
		fmt.Fprint(out, " (not sealed yet: entries from just before the start may still join)")
	}
	fmt.Fprintln(out)
	if *user != "" {
		if place < 0 {
			fmt.Fprintf(out, "user %q did not enter the pre-queue\n", *user)
		} else {
			fmt.Fprintf(out, "user %q is pseudonym %s, place %d of %d (0 is first)\n", *user, order[place], place, len(order))
		}
	}
	if *all {
		for i, ps := range order {
			fmt.Fprintf(out, "%d\t%s\n", i, ps)
		}
	}
	return nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}
