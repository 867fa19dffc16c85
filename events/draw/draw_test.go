package draw

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// positionTable shuffles the same n entrants with trials seeds and counts
// how often each entrant (in entry order) lands at each place.
func positionTable(t *testing.T, n, trials int, order func(seed []byte, entrants []string) []string) [][]float64 {
	counts := make([][]float64, n)
	for i := range counts {
		counts[i] = make([]float64, n)
	}
	for trial := range trials {
		seed := sha256.Sum256([]byte(fmt.Sprintf("trial %d", trial))) // reproducible, and as good as random for this
		entrants := make([]string, n)
		index := map[string]int{}
		for i := range entrants {
			entrants[i] = Pseudonym(seed[:], fmt.Sprintf("user-%d", i))
			index[entrants[i]] = i
		}
		for place, p := range order(seed[:], entrants) {
			counts[index[p]][place]++
		}
	}
	return counts
}

// chiSquareP is the p-value of Pearson's test that every cell of counts
// has the same expectation, with (n-1)² degrees of freedom: a permutation
// table's rows and columns each sum to the number of trials.
func chiSquareP(counts [][]float64, trials int) float64 {
	n := len(counts)
	want := float64(trials) / float64(n)
	var x2 float64
	for _, row := range counts {
		for _, c := range row {
			x2 += (c - want) * (c - want) / want
		}
	}
	return upperGamma(float64((n-1)*(n-1))/2, x2/2)
}

// upperGamma is the regularized upper incomplete gamma function Q(a, x), by
// its series below a+1 and its continued fraction above (Numerical Recipes).
func upperGamma(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for k := 1; k < 1000; k++ {
			term *= x / (a + float64(k))
			sum += term
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	b, c, d := x+1-a, 1/1e-300, 1/(x+1-a)
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		c = b + an/c
		d = 1 / d
		h *= d * c
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}

// Over many seeds every entrant is equally likely at every place: the
// chi-square test does not reject uniformity. The control, admitting in
// entry order as a FIFO pre-queue would, is rejected outright.
func TestShuffleIsUniform(t *testing.T) {
	const n, trials = 8, 8000
	byPseudonym := func(_ []byte, entrants []string) []string { return Order(entrants) }
	p := chiSquareP(positionTable(t, n, trials, byPseudonym), trials)
	t.Logf("shuffle: p = %.3f", p)
	require.Greater(t, p, 0.001)

	fifo := func(_ []byte, entrants []string) []string { return slices.Clone(entrants) }
	p = chiSquareP(positionTable(t, n, trials, fifo), trials)
	t.Logf("control, entry order: p = %.3g", p)
	require.Less(t, p, 0.001)
}

// The chi-square p-value itself: known quantiles of the distribution.
func TestUpperGamma(t *testing.T) {
	for _, c := range []struct{ df, x, p float64 }{
		{1, 3.841, 0.05}, {9, 27.877, 0.001}, {49, 66.339, 0.05}, {49, 85.351, 0.001},
	} {
		require.InDelta(t, c.p, upperGamma(c.df/2, c.x/2), c.p/100, "df %v x %v", c.df, c.x)
	}
}

// The verifier re-derives the order from the public data, finds a user's
// place from its own id, and refuses data that does not add up.
func TestVerify(t *testing.T) {
	seed, err := NewSeed()
	require.NoError(t, err)
	var entrants []string
	for _, u := range []string{"ann", "bob", "cy", "dee"} {
		entrants = append(entrants, Pseudonym(seed, u))
	}
	pub := Prequeue{Commitment: Commitment(seed), Seed: hex.EncodeToString(seed), Entrants: entrants}

	order, place, err := Verify(pub, "cy")
	require.NoError(t, err)
	require.Equal(t, Order(entrants), order)
	require.Equal(t, Pseudonym(seed, "cy"), order[place])
	_, place, err = Verify(pub, "eve")
	require.NoError(t, err)
	require.Equal(t, -1, place, "not an entrant")

	bad := func(edit func(p *Prequeue)) error {
		p := pub
		p.Entrants = slices.Clone(pub.Entrants)
		edit(&p)
		_, _, err := Verify(p, "")
		return err
	}
	require.ErrorIs(t, bad(func(p *Prequeue) { p.Seed = "" }), ErrSeedNotRevealed)
	other, err := NewSeed()
	require.NoError(t, err)
	require.ErrorContains(t, bad(func(p *Prequeue) { p.Seed = hex.EncodeToString(other) }), "commitment")
	require.ErrorContains(t, bad(func(p *Prequeue) { p.Seed = "zz" }), "hex")
	require.ErrorContains(t, bad(func(p *Prequeue) { p.Entrants[1] = p.Entrants[0] }), "twice")
	require.ErrorContains(t, bad(func(p *Prequeue) { p.Entrants[1] = "ABC" }), "not a pseudonym")
}
