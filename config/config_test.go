package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Redis topology comes from exactly one of REDIS_URL,
// REDIS_CLUSTER_ADDRS and REDIS_SENTINEL_ADDRS (+ REDIS_SENTINEL_MASTER);
// anything ambiguous or incomplete is refused with a message naming the
// variables.
func TestRedisTopology(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		topology string
		want     Redis
		err      string
	}{
		{name: "default single node", vars: map[string]string{},
			topology: "single", want: Redis{URL: DefaultRedisURL, ClusterAddrs: []string{}, SentinelAddrs: []string{}}},
		{name: "explicit URL", vars: map[string]string{"REDIS_URL": "redis://10.0.0.1:6380/2"},
			topology: "single", want: Redis{URL: "redis://10.0.0.1:6380/2", ClusterAddrs: []string{}, SentinelAddrs: []string{}}},
		{name: "cluster", vars: map[string]string{"REDIS_CLUSTER_ADDRS": "10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000", "REDIS_PASSWORD": "pw"},
			topology: "cluster", want: Redis{ClusterAddrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, SentinelAddrs: []string{}, Password: "pw"}},
		{name: "sentinel", vars: map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1:26379,10.0.0.2:26379", "REDIS_SENTINEL_MASTER": "holdfast",
			"REDIS_SENTINEL_PASSWORD": "spw", "REDIS_USERNAME": "hf", "REDIS_PASSWORD": "pw"},
			topology: "sentinel", want: Redis{SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, ClusterAddrs: []string{},
				SentinelMaster: "holdfast", SentinelPassword: "spw", Username: "hf", Password: "pw"}},
		{name: "URL and cluster", vars: map[string]string{"REDIS_URL": "redis://x:6379/0", "REDIS_CLUSTER_ADDRS": "a:1"},
			err: "REDIS_URL and REDIS_CLUSTER_ADDRS are set together; choose one Redis topology"},
		{name: "cluster and sentinel", vars: map[string]string{"REDIS_CLUSTER_ADDRS": "a:1", "REDIS_SENTINEL_ADDRS": "b:2", "REDIS_SENTINEL_MASTER": "m"},
			err: "REDIS_CLUSTER_ADDRS and REDIS_SENTINEL_ADDRS are set together"},
		{name: "sentinel without master", vars: map[string]string{"REDIS_SENTINEL_ADDRS": "b:2"},
			err: "REDIS_SENTINEL_ADDRS needs REDIS_SENTINEL_MASTER"},
		{name: "master without sentinels", vars: map[string]string{"REDIS_SENTINEL_MASTER": "m"},
			err: "REDIS_SENTINEL_MASTER needs REDIS_SENTINEL_ADDRS"},
		{name: "empty address", vars: map[string]string{"REDIS_CLUSTER_ADDRS": "a:1,,b:2"},
			err: "empty address"},
		{name: "password beside a URL", vars: map[string]string{"REDIS_URL": "redis://x:6379/0", "REDIS_PASSWORD": "pw"},
			err: "put a single node's credentials in REDIS_URL"},
		{name: "sentinel password without sentinels", vars: map[string]string{"REDIS_CLUSTER_ADDRS": "a:1", "REDIS_SENTINEL_PASSWORD": "x"},
			err: "REDIS_SENTINEL_PASSWORD needs REDIS_SENTINEL_ADDRS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.vars["JWT_SECRET"] = testSecret
			c, err := FromMap(tc.vars)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Redis)
			require.Equal(t, tc.topology, c.Redis.Topology())
		})
	}
}

const testSecret = "0123456789abcdef0123456789abcdef"

// JWT_SECRET has no default: without it, or with a short one, the
// configuration is refused, so no deployment runs with a known secret.
func TestJWTSecretIsRequired(t *testing.T) {
	_, err := FromMap(map[string]string{})
	require.ErrorContains(t, err, "JWT_SECRET is required")
	_, err = FromMap(map[string]string{"JWT_SECRET": "short"})
	require.ErrorContains(t, err, "at least 32 bytes")
	c, err := FromMap(map[string]string{"JWT_SECRET": testSecret})
	require.NoError(t, err)
	require.Equal(t, testSecret, c.JWTSecret)
}

// JWT_SECRET_PREVIOUS, while a rotation lasts, is as strong as JWT_SECRET
// and not the same secret (an operator who set both to the new one).
func TestJWTSecretPreviousIsChecked(t *testing.T) {
	_, err := FromMap(map[string]string{"JWT_SECRET": testSecret, "JWT_SECRET_PREVIOUS": "short"})
	require.ErrorContains(t, err, "JWT_SECRET_PREVIOUS must be at least 32 bytes")
	_, err = FromMap(map[string]string{"JWT_SECRET": testSecret, "JWT_SECRET_PREVIOUS": testSecret})
	require.ErrorContains(t, err, "JWT_SECRET_PREVIOUS is the secret it was replaced by")
	c, err := FromMap(map[string]string{"JWT_SECRET": testSecret, "JWT_SECRET_PREVIOUS": "fedcba9876543210fedcba9876543210"})
	require.NoError(t, err)
	require.Equal(t, "fedcba9876543210fedcba9876543210", c.JWTSecretPrevious)
}

// Rate limits are requests per second: 0 turns one off; negative, infinite
// or not-a-number values are refused rather than turned into a limit that
// refuses everything.
func TestRateLimitsMustBeFinite(t *testing.T) {
	for _, v := range []string{"-1", "Inf", "+Inf", "NaN"} {
		for _, name := range []string{"RATE_LIMIT_PER_IP", "RATE_LIMIT_PER_USER"} {
			_, err := FromMap(map[string]string{name: v, "JWT_SECRET": "0123456789abcdef0123456789abcdef"})
			require.ErrorContains(t, err, "rate limits must be finite", "%s=%s", name, v)
		}
	}
	c, err := FromMap(map[string]string{"RATE_LIMIT_PER_IP": "0", "RATE_LIMIT_PER_USER": "0.5", "JWT_SECRET": "0123456789abcdef0123456789abcdef"})
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0.5}, []float64{c.RateLimitPerIP, c.RateLimitPerUser})
}

// Requests are kept a week unless told otherwise; 0 keeps them forever and
// a negative retention is refused.
func TestRequestRetention(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	c, err := FromMap(map[string]string{"JWT_SECRET": secret})
	require.NoError(t, err)
	require.Equal(t, 7*24*time.Hour, c.RequestRetention)
	c, err = FromMap(map[string]string{"JWT_SECRET": secret, "REQUEST_RETENTION": "0"})
	require.NoError(t, err)
	require.Zero(t, c.RequestRetention)
	_, err = FromMap(map[string]string{"JWT_SECRET": secret, "REQUEST_RETENTION": "-1h"})
	require.ErrorContains(t, err, "REQUEST_RETENTION")
}

// PROMETHEUS_URL is empty by default (Asynqmon without its Metrics tab); set,
// it must be a Prometheus server's http(s) address.
func TestPrometheusURL(t *testing.T) {
	c, err := FromMap(map[string]string{"JWT_SECRET": testSecret})
	require.NoError(t, err)
	require.Empty(t, c.PrometheusURL)
	for _, good := range []string{"http://127.0.0.1:9090", "https://prometheus.example:443/prom/"} {
		c, err = FromMap(map[string]string{"JWT_SECRET": testSecret, "PROMETHEUS_URL": good})
		require.NoError(t, err, good)
		require.Equal(t, good, c.PrometheusURL)
	}
	for _, bad := range []string{"127.0.0.1:9090", "prometheus:9090", "ftp://p:9090", "http://", "http://p:9090/?x=1", "http://p:9090/#f"} {
		_, err = FromMap(map[string]string{"JWT_SECRET": testSecret, "PROMETHEUS_URL": bad})
		require.ErrorContains(t, err, "PROMETHEUS_URL", bad)
	}
}

// MONITORING_ADDR is empty (Asynqmon on HTTP_ADDR), "off" or an address.
func TestMonitoringAddr(t *testing.T) {
	for _, good := range []string{"", "off", ":8082", "127.0.0.1:8082"} {
		c, err := FromMap(map[string]string{"JWT_SECRET": testSecret, "MONITORING_ADDR": good})
		require.NoError(t, err, good)
		require.Equal(t, good, c.MonitoringAddr)
	}
	for _, bad := range []string{"on", "8082", "false", "http://127.0.0.1:8082"} {
		_, err := FromMap(map[string]string{"JWT_SECRET": testSecret, "MONITORING_ADDR": bad})
		require.ErrorContains(t, err, "MONITORING_ADDR", bad)
	}
}
