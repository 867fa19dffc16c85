package testenv

import "os"

// EnvSpeedups selects the throughput mechanisms of the systems and engines
// tests build: "off" turns every one of them off (make test runs the
// protocol's tests once more that way); anything else leaves each at its
// default, on. It is how the suite shows that holdfast's guarantees rest on
// the protocol alone and that each speed-up only makes it faster.
const EnvSpeedups = "HOLDFAST_TEST_SPEEDUPS"

// SpeedupsOff reports whether this test run has the speed-ups turned off.
func SpeedupsOff() bool { return os.Getenv(EnvSpeedups) == "off" }

// speedupsOff is each speed-up's switch (docs/configuration.md), off.
var speedupsOff = map[string]string{
	"AGGREGATE_DEFERRED_TASKS": "false", // keyed/deferred.go
	"GROUP_COMMIT":             "false", // requests/group.go
	"BATCH_ENQUEUE":            "false", // storage.BatchScripts
	"ANNOUNCED_VIEWS":          "false", // api/notify.go, api await
	"CART_GROUP_READ":          "false", // storage.GroupRead in the shop
	"QUIET_WAITING":            "false", // keyed/waiting.go
	"HOLD_WRITES_TOGETHER":     "false", // stays/writes.go
}
