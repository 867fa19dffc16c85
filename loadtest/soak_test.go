package loadtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// soakRun is a soak of 100 s at 300/s with 60 s retention and 120 s idle,
// sampled every 10 s: the API's RSS follows apiRSS (one value per sample of
// the write phase), the worker's stays at 20 MiB, Redis ends at
// redisEndKeys keys and redisEndMiB, and the requests table peaks at
// rowsPeak.
func soakRun(apiRSS []float64, redisEndKeys, redisEndMiB float64, rowsPeak int64) *SoakReport {
	r := &SoakReport{Rate: 300, WriteRate: 300, WriteSeconds: 100, IdleSeconds: 120, SampleEverySeconds: 10, RetentionSeconds: 60}
	r.Samples = append(r.Samples, SoakSample{Seconds: -0.5, Phase: PhaseBaseline, Values: map[string]float64{"api rss": 20, "worker rss": 20,
		"api heap": 4, "worker heap": 4, "redis MiB": 1, "redis keys": 40, "requests rows": 0, "requests MiB": 0, "key_fences rows": 0, "key_fences MiB": 0}})
	for i, rss := range apiRSS {
		keys := 300 * 10 * (i + 1)
		rows := float64(min(int64(keys), rowsPeak))
		r.Samples = append(r.Samples, SoakSample{Seconds: float64(10 * (i + 1)), Phase: PhaseWrites, Keys: keys, Values: map[string]float64{
			"api rss": rss, "worker rss": 20, "api heap": rss / 2, "worker heap": 5,
			"redis MiB": 1 + float64(keys)/10000, "redis keys": 40 + float64(keys),
			"requests rows": rows, "requests MiB": rows / 1000, "key_fences rows": float64(keys), "key_fences MiB": float64(keys) / 5000}})
	}
	r.Samples = append(r.Samples, SoakSample{Seconds: 220, Phase: PhaseIdle, Keys: 30000, Values: map[string]float64{
		"api rss": apiRSS[len(apiRSS)-1], "worker rss": 20, "redis keys": redisEndKeys, "redis MiB": redisEndMiB,
		"requests rows": 0, "requests MiB": 0.5, "key_fences rows": 30000, "key_fences MiB": 6}})
	r.Checks = r.check()
	return r
}

func checkNamed(t *testing.T, r *SoakReport, prefix string) SoakCheck {
	t.Helper()
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", prefix, r.Checks)
	return SoakCheck{}
}

// A soak whose memory holds, whose Redis returns to its baseline and whose
// requests stay under rate × retention passes every check; the warm-up's
// growth (the first 20 s) does not count.
func TestSoakChecksPass(t *testing.T) {
	rss := []float64{30, 45, 50, 52, 55, 54, 53, 56, 57, 56}
	r := soakRun(rss, 300, 2.5, 18000)
	require.Empty(t, r.Violations())
	api := checkNamed(t, r, "api RSS")
	require.Equal(t, VerdictPass, api.Verdict)
	require.Equal(t, "50.0 MiB at 30 s, then 50.0–57.0 MiB (+14.0%) while keys grew 9000 → 30000 (×3.3)", api.Measured)
	require.Equal(t, VerdictPass, checkNamed(t, r, "worker RSS").Verdict)
	keys := checkNamed(t, r, "Redis keys")
	require.Equal(t, VerdictPass, keys.Verdict, "260 keys more than the baseline: within the 500-key slack")
	require.Equal(t, "40 → 300 (+650%) after 120 s idle", keys.Measured)
	require.Equal(t, "≤ baseline + max(15%, 500 keys) = 540", keys.Bound)
	require.Equal(t, VerdictPass, checkNamed(t, r, "Redis used_memory").Verdict)
	rows := checkNamed(t, r, "requests rows")
	require.Equal(t, VerdictPass, rows.Verdict)
	// 300/s × 60 s × 1.2 = 21,600, and 300/s for one 15 s task period.
	require.Equal(t, "≤ 300.0/s × 60 s × 1.2 + 4500 (one retention-task period, 15s) = 26100", rows.Bound)
	require.Len(t, r.Checks, 5, "the rows of key_fences and key_progress are in the samples, with no bound yet")
}

// Memory that keeps growing, Redis that keeps a key per key written and a
// requests table past its bound each fail a check, and a failed check
// fails the run.
func TestSoakChecksFail(t *testing.T) {
	rss := []float64{30, 45, 50, 60, 70, 80, 90, 100, 110, 120}
	r := soakRun(rss, 30040, 4, 26101)
	api := checkNamed(t, r, "api RSS")
	require.Equal(t, VerdictFail, api.Verdict)
	require.Contains(t, api.Measured, "(+140.0%)")
	require.Equal(t, VerdictPass, checkNamed(t, r, "worker RSS").Verdict)
	require.Equal(t, VerdictFail, checkNamed(t, r, "Redis keys").Verdict)
	mem := checkNamed(t, r, "Redis used_memory")
	require.Equal(t, VerdictFail, mem.Verdict, "3 MiB over a 1 MiB baseline is past the 2 MiB slack")
	require.Equal(t, "1.00 MiB → 4.00 MiB (+300%) after 120 s idle", mem.Measured)
	require.Equal(t, VerdictFail, checkNamed(t, r, "requests rows").Verdict)
	require.Len(t, r.Violations(), 4)
	require.Contains(t, r.Violations()[0], "soak: api RSS after warm-up: 50.0 MiB at 30 s")

	rec := NewRecorder()
	rec.Start()
	rec.Stop()
	rep := rec.Report("soak", Options{Concurrency: 4}, 30000, nil, r.Violations())
	rep.Soak = r
	require.False(t, rep.OK)
	var out bytes.Buffer
	rep.WriteText(&out)
	text := out.String()
	require.Contains(t, text, "4 VIOLATIONS")
	require.Contains(t, text, "    FAIL    api RSS after warm-up: 50.0 MiB at 30 s")
	require.Contains(t, text, "    pass    worker RSS after warm-up: 20.0 MiB at 30 s, then 20.0–20.0 MiB (+0.0%) while keys grew 9000 → 30000 (×3.3); within ±15% of its first sample after warm-up\n")
}

// Without an idle wait Redis is only reported; without the retention the
// rows are; without samples of a part its check is skipped, not passed.
func TestSoakChecksWithoutBounds(t *testing.T) {
	r := soakRun([]float64{30, 30, 30}, 99999, 99, 1e6)
	r.IdleSeconds, r.RetentionSeconds = 0, 0
	r.Checks = r.check()
	require.Empty(t, r.Violations())
	require.Equal(t, VerdictReport, checkNamed(t, r, "Redis keys").Verdict)
	require.Equal(t, VerdictReport, checkNamed(t, r, "requests rows").Verdict)
	require.Equal(t, "peak 9000 at 30 s", checkNamed(t, r, "requests rows").Measured)

	short := &SoakReport{WriteSeconds: 10, Samples: []SoakSample{{Phase: PhaseBaseline}, {Seconds: 10, Phase: PhaseWrites, Keys: 5}}}
	short.Checks = short.check()
	require.Empty(t, short.Violations())
	for _, c := range short.Checks {
		require.Equal(t, VerdictSkipped, c.Verdict, c.Name)
	}
	require.Equal(t, "0 samples of api's RSS after warm-up (2 s), need 2", checkNamed(t, short, "api RSS").Measured)
}

// The sample table has a column per part and a row per sample, "–" where a
// part was not read; the JSON report carries the samples.
func TestSoakTableAndJSON(t *testing.T) {
	r := soakRun([]float64{30, 31}, 41, 1.01, 100)
	delete(r.Samples[1].Values, "worker rss")
	r.Samples[1].Errors = []string{"worker: connection refused"}
	var text bytes.Buffer
	r.writeText(&text)
	lines := strings.Split(text.String(), "\n")
	require.Equal(t, []string{"t", "s", "phase", "keys", "api", "rss", "api", "heap", "worker", "rss", "worker", "heap", "redis", "MiB", "redis", "keys",
		"requests", "rows", "requests", "MiB", "key_fences", "rows", "key_fences", "MiB", "key_progress", "rows", "key_progress", "MiB"}, strings.Fields(lines[1]))
	require.Equal(t, []string{"10.0", "writes", "3000", "30.0", "15.0", "–", "5.0", "1.30", "3040", "100", "0.10", "3000", "0.60", "–", "–"},
		strings.Fields(lines[3]))
	require.Equal(t, utf8.RuneCountInString(lines[1]), utf8.RuneCountInString(lines[3]), "the columns are aligned:\n%s", text.String())
	require.Contains(t, text.String(), "\n    at 10 s, not read: worker: connection refused\n")

	rep := &Report{Scenario: "soak", Soak: r, OK: true, Violations: []string{}}
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var got struct {
		Soak struct {
			Samples []SoakSample
			Checks  []SoakCheck
		}
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	require.Len(t, got.Soak.Samples, 4)
	require.Equal(t, 3040.0, got.Soak.Samples[1].Values["redis keys"])
	require.NotEmpty(t, got.Soak.Checks)
}

// A warm-up given in seconds replaces the fifth of the write phase: memory
// is held to its first sample after it, here over the whole tenfold
// growth of the keys.
func TestSoakWarmUpGiven(t *testing.T) {
	r := soakRun([]float64{30, 31, 32, 33, 34, 33, 32, 33, 34, 34}, 300, 2.5, 18000)
	r.WarmUpSeconds = 5
	r.Checks = r.check()
	require.Empty(t, r.Violations())
	require.Equal(t, "30.0 MiB at 10 s, then 30.0–34.0 MiB (+13.3%) while keys grew 3000 → 30000 (×10.0)", checkNamed(t, r, "api RSS").Measured)
	r.WarmUpSeconds = 0
	r.Checks = r.check()
	require.Equal(t, "32.0 MiB at 30 s, then 32.0–34.0 MiB (+6.2%) while keys grew 9000 → 30000 (×3.3)", checkNamed(t, r, "api RSS").Measured)
}
