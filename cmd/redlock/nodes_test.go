package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseNodes(t *testing.T) {
	t.Setenv(envNodes, "")
	specs, err := parseNodes(" redis://:pw@a:1/2 , rediss://user:pw@b, unix:///tmp/r.sock?db=3 ")
	require.NoError(t, err)
	require.Len(t, specs, 3)

	a := specs[0].opts
	require.Equal(t, "a:1", a.Addr)
	require.Equal(t, "pw", a.Password)
	require.Equal(t, 2, a.DB)
	require.Nil(t, a.TLSConfig)
	require.Equal(t, "redis://:xxxxx@a:1/2", specs[0].url)

	b := specs[1].opts
	require.Equal(t, "b:6379", b.Addr)
	require.Equal(t, "user", b.Username)
	require.NotNil(t, b.TLSConfig, "rediss:// must use TLS")
	require.Equal(t, "b", b.TLSConfig.ServerName)

	c := specs[2].opts
	require.Equal(t, "unix", c.Network)
	require.Equal(t, "/tmp/r.sock", c.Addr)
	require.Equal(t, 3, c.DB)

	t.Setenv(envNodes, "redis://from-env:7000")
	specs, err = parseNodes("")
	require.NoError(t, err)
	require.Equal(t, "from-env:7000", specs[0].opts.Addr)
	specs, err = parseNodes("redis://from-flag:7000")
	require.NoError(t, err)
	require.Equal(t, "from-flag:7000", specs[0].opts.Addr, "--nodes must win over %s", envNodes)
}

// Bare addresses and socket paths are redis:// and unix:// URLs.
func TestParseNodesBare(t *testing.T) {
	t.Setenv(envNodes, "")
	specs, err := parseNodes("a, b:7000, u:pw@c:7001/2, [::1]:7002, /tmp/r.sock, redis://d:7003")
	require.NoError(t, err)
	want := []struct {
		network, addr, password string
		db                      int
	}{
		{"tcp", "a:6379", "", 0},
		{"tcp", "b:7000", "", 0},
		{"tcp", "c:7001", "pw", 2},
		{"tcp", "[::1]:7002", "", 0},
		{"unix", "/tmp/r.sock", "", 0},
		{"tcp", "d:7003", "", 0},
	}
	require.Len(t, specs, len(want))
	for i, w := range want {
		o := specs[i].opts
		got := []any{o.Network, o.Addr, o.Password, o.DB}
		require.Equal(t, []any{w.network, w.addr, w.password, w.db}, got, "node %d: got %v, want %+v", i, got, w)
	}
	require.Equal(t, "u:xxxxx@c:7001/2", specs[2].url, "the shown node must not carry the password")

	t.Setenv(envNodes, "e:7004,f")
	specs, err = parseNodes("")
	require.NoError(t, err)
	require.Equal(t, "e:7004", specs[0].opts.Addr)
	require.Equal(t, "f:6379", specs[1].opts.Addr)
}

// A malformed address is refused when it is parsed: go-redis would take an
// empty port for 6379 and "notaurl::" for the host "notaurl:", and a port
// out of range, and dial them in vain for as long as run waits.
func TestParseNodesMalformed(t *testing.T) {
	t.Setenv(envNodes, "")
	for in, want := range map[string]string{
		"notaurl::":                 `bad node URL "notaurl::": the host "notaurl:" has a colon`,
		"redis://notaurl::":         `bad node URL "redis://notaurl::": the host "notaurl:" has a colon`,
		"rediss://u:hunter2@a:b:1":  `bad node URL "rediss://u:xxxxx@a:b:1": the host "a:b" has a colon`,
		"::1":                       `bad node URL "::1": the host ":" has a colon`,
		"host:":                     `bad node URL "host:": the port after the colon is empty`,
		"redis://host:/0":           `bad node URL "redis://host:/0": the port after the colon is empty`,
		"[::1]:":                    `bad node URL "[::1]:": the port after the colon is empty`,
		"host:abc":                  `bad node URL "host:abc": invalid port ":abc" after host`,
		"redis://u:hunter2@host:-1": `bad node URL "redis://u:xxxxx@host:-1": invalid port ":-1" after host`,
		"host:0":                    `bad node URL "host:0": port 0 is out of range: want 1 to 65535`,
		"redis://host:65536":        `bad node URL "redis://host:65536": port 65536 is out of range`,
		"host:99999999999999999999": `bad node URL "host:99999999999999999999": port 99999999999999999999 is out of range`,
	} {
		_, err := parseNodes("h:1," + in)
		require.ErrorContains(t, err, "--nodes: "+want, "parseNodes(%q)", in)
		require.NotContains(t, err.Error(), "hunter2")
	}
	// What is well formed still parses.
	specs, err := parseNodes("h:1, h:65535, [::1], [::1]:7000, redis://h, rediss://u:p@h:2/3, unix:///tmp/s, /tmp/t, redis://[fe80::1%25eth0]:6")
	require.NoError(t, err)
	var addrs []string
	for _, s := range specs {
		addrs = append(addrs, s.opts.Addr)
	}
	require.Equal(t, []string{"h:1", "h:65535", "[::1]:6379", "[::1]:7000", "h:6379", "h:2", "/tmp/s", "/tmp/t", "[fe80::1%eth0]:6"}, addrs)
}

func TestFewNodesWarning(t *testing.T) {
	for n, want := range map[int]string{1: "warning: 1 node: the lock survives no node failure", 2: "warning: 2 nodes: ", 3: "", 5: ""} {
		got := fewNodesWarning(n)
		if want == "" {
			require.Empty(t, got, "%d nodes: got %q, want no warning", n, got)
			continue
		}
		require.True(t, strings.HasPrefix(got, want), "%d nodes: got %q, want it to start with %q", n, got, want)
	}
}

func TestParseSeconds(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "5": 5 * time.Second, "0.5": 500 * time.Millisecond, " 2 ": 2 * time.Second,
		"90s": 90 * time.Second, "2m": 2 * time.Minute, "0s": 0, "1.5h": 90 * time.Minute,
	} {
		got, err := parseSeconds(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "parseSeconds(%q): got %v, want %v", in, got, want)
	}
	for in, want := range map[string]string{
		"-1": "must not be negative", "-1s": "must not be negative", "soon": "want seconds",
		"": "want seconds", "inf": "out of range", "NaN": "out of range", "1e300": "out of range",
	} {
		_, err := parseSeconds(in)
		require.ErrorContains(t, err, want, "parseSeconds(%q)", in)
	}
}

func TestCLIOptions(t *testing.T) {
	t.Setenv(envNodes, "")
	specs, err := parseNodes("redis://a,redis://b?max_retries=2&client_name=mine")
	require.NoError(t, err)
	a, b := cliOptions(specs[0].opts), cliOptions(specs[1].opts)
	require.Equal(t, -1, a.MaxRetries, "no go-redis retries by default")
	require.Equal(t, 2, b.MaxRetries, "a URL's max_retries wins")
	require.Equal(t, "redlock-cli", a.ClientName)
	require.Equal(t, "mine", b.ClientName)
	require.True(t, a.ContextTimeoutEnabled)
	require.Zero(t, specs[0].opts.MaxRetries, "cliOptions must not change its argument")
}

func TestMaskPassword(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1/0":      "redis://u:xxxxx@h:1/0",
		"redis://:secret@h":           "redis://:xxxxx@h",
		"redis://u@h":                 "redis://u@h",
		"redis://h:6379":              "redis://h:6379",
		"redis://u:p@ss@h":            "redis://u:xxxxx@h",
		"redis://u:bad pass%zz@h:bad": "redis://u:xxxxx@h:bad",
		"u:p@h":                       "u:xxxxx@h",
		"h:6379":                      "h:6379",
		"/tmp/redis.sock":             "/tmp/redis.sock",
	} {
		got := maskPassword(in)
		require.Equal(t, want, got, "maskPassword(%q): got %q, want %q", in, got, want)
	}
}

// Usage errors are found before any request: these run in-process.
func TestRunCommandUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	const ok = "redis://127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		want []string // on stderr
		not  string   // not on stderr
	}{
		{"no nodes", []string{"--key", "k", "true"}, []string{"no nodes: give --nodes", envNodes}, ""},
		{"scheme", []string{"--nodes", ok + ",http://h:1", "--key", "k", "true"}, []string{`bad node URL "http://h:1": redis: invalid URL scheme: http`}, ""},
		{"bare address", []string{"--nodes", "u:hunter2@h:port", "--key", "k", "true"}, []string{`bad node URL "u:xxxxx@h:port"`, "invalid port"}, "hunter2"},
		{"port", []string{"--nodes", "redis://u:hunter2@h:port", "--key", "k", "true"}, []string{`bad node URL "redis://u:xxxxx@h:port"`, "invalid port"}, "hunter2"},
		{"database", []string{"--nodes", "redis://h/abc", "--key", "k", "true"}, []string{`bad node URL "redis://h/abc": redis: invalid database number: "abc"`}, ""},
		{"option", []string{"--nodes", "redis://h?bogus=1", "--key", "k", "true"}, []string{`bad node URL "redis://h?bogus=1"`, "bogus"}, ""},
		{"empty URL", []string{"--nodes", ok + ",,redis://h:2", "--key", "k", "true"}, []string{"--nodes: URL 2 is empty"}, ""},
		{"same server twice", []string{"--nodes", ok + "," + ok, "--key", "k", "true"}, []string{"same server"}, ""},
		{"no key", []string{"--nodes", ok, "true"}, []string{"-key is required"}, ""},
		{"no command", []string{"--nodes", ok, "--key", "k"}, []string{"no command given", "redlock lock holds a lock without one"}, ""},
		{"-c and a command", []string{"--nodes", ok, "--key", "k", "-c", "true", "false"}, []string{"-command (-c) and a command after the flags exclude each other"}, ""},
		{"-w and -n", []string{"--nodes", ok, "--key", "k", "-w", "5", "-n", "true"}, []string{"exclude each other"}, ""},
		{"negative -w", []string{"--nodes", ok, "--key", "k", "-w", "-1", "true"}, []string{`invalid value "-1" for flag -w: must not be negative`}, ""},
		{"bad -timeout", []string{"--nodes", ok, "--key", "k", "--timeout", "soon", "true"}, []string{`invalid value "soon" for flag -timeout: want seconds (5, 0.5) or a duration (90s, 2m)`}, ""},
		{"-E out of range", []string{"--nodes", ok, "--key", "k", "-E", "256", "true"}, []string{"-conflict-exit-code must be in [0, 255], got 256"}, ""},
		{"label too long", []string{"--nodes", ok, "--key", "k", "--label", strings.Repeat("x", 200), "true"}, []string{"label is 200 bytes"}, ""},
		{"shared and exclusive", []string{"-s", "-x", "--nodes", ok, "--key", "k", "true"}, []string{"-shared and -exclusive exclude each other"}, ""},
		{"permits zero", []string{"--permits", "0", "--nodes", ok, "--key", "k", "true"}, []string{"-permits must be at least 1, got 0"}, ""},
		{"wait and no-wait", []string{"--nodes", ok, "--key", "k", "--wait", "1s", "--no-wait", "true"}, []string{"exclude each other"}, ""},
		{"ttl", []string{"--nodes", ok, "--key", "k", "--ttl", "0s", "true"}, []string{"-ttl must be positive, got 0s"}, ""},
		{"grace", []string{"--nodes", ok, "--key", "k", "--grace", "-1s", "true"}, []string{"-grace must not be negative, got -1s"}, ""},
		{"unknown flag", []string{"--bogus"}, []string{"redlock run: flag provided but not defined: -bogus (see 'redlock help run')\n"}, "usage: redlock run"},
		{"empty port", []string{"--nodes", ok + ",h:", "--key", "k", "true"}, []string{`bad node URL "h:": the port after the colon is empty`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"run"}, tt.args...), &stdout, &stderr)
			require.Equal(t, exitUsage, code, "exit status: got %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			for _, w := range tt.want {
				require.Contains(t, stderr.String(), w, "stderr: got %q, want %q in it", stderr.String(), w)
			}
			if tt.not != "" {
				require.NotContains(t, stderr.String(), tt.not)
			}
			require.Empty(t, stdout.String())
		})
	}
}

// Lock takes run's flags, and needs no command.
func TestLockCommandUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", "k"}, "no nodes"},
		{[]string{"--nodes", "h"}, "-key is required"},
		{[]string{"--nodes", "h", "--key", "k", "-w", "1", "--no-wait"}, "exclude each other"},
		{[]string{"--bogus"}, "redlock lock: flag provided but not defined: -bogus (see 'redlock help lock')"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"lock"}, tt.args...), &stdout, &stderr)
		require.Equal(t, exitUsage, code, "%v: exit status: got %d, want %d", tt.args, code, exitUsage)
		require.Contains(t, stderr.String(), tt.want, "%v: stderr: got %q", tt.args, stderr.String())
		require.Empty(t, stdout.String())
	}
}

func TestCheckCommandUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "no nodes"},
		{[]string{"--nodes", "h", "extra"}, `unexpected argument "extra"`},
		{[]string{"--nodes", "h", "--node-timeout", "0s"}, "-node-timeout must be positive"},
		{[]string{"--nodes", "h", "--timeout", "1s"}, "the per-node timeout is -node-timeout"},
		{[]string{"--nodes", "h", "--node-timeout", "1s", "--ttl", "2"}, "-ttl must be more than twice -node-timeout"},
		{[]string{"--nodes", "ftp://h"}, `bad node URL "ftp://h"`},
		{[]string{"--nodes", "h:1,h:1"}, "same server"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"check"}, tt.args...), &stdout, &stderr)
		require.Equal(t, exitUsage, code, "%v: exit status: got %d, want %d", tt.args, code, exitUsage)
		require.Contains(t, stderr.String(), tt.want, "%v: stderr: got %q", tt.args, stderr.String())
	}
}

func TestStatusCommandUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", "k"}, "no nodes"},
		{[]string{"--nodes", "redis://h"}, "-key is required"},
		{[]string{"--nodes", "redis://h", "--key", "k", "extra"}, `unexpected argument "extra"`},
		{[]string{"--nodes", "redis://h", "--key", "k", "--node-timeout", "0s"}, "-node-timeout must be positive"},
		{[]string{"--nodes", "redis://h", "--key", "k", "--timeout", "1s"}, "the per-node timeout is -node-timeout"},
		{[]string{"--nodes", "redis://h:0", "--key", "k"}, `bad node URL "redis://h:0": port 0 is out of range`},
		{[]string{"--nodes", "ftp://h", "--key", "k"}, `bad node URL "ftp://h"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"status"}, tt.args...), &stdout, &stderr)
		require.Equal(t, exitUsage, code, "%v: exit status: got %d, want %d", tt.args, code, exitUsage)
		require.Contains(t, stderr.String(), tt.want, "%v: stderr: got %q", tt.args, stderr.String())
	}
}

// The help of run documents every exit status run has of its own.
func TestHelpRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run(t.Context(), []string{"help", "run"}, &stdout, &stderr))
	help := stdout.String()
	for _, code := range []int{exitUsage, exitUnavailable, exitNotAcquired, exitLockLost, exitCannotRun, exitNotFound} {
		require.Regexp(t, `(?m)^  `+strconv.Itoa(code)+` `, help, "help run: no line for exit status %d", code)
	}
	for _, want := range []string{"128+N", "REDLOCK_KEY", "REDLOCK_TOKEN", "REDLOCK_FENCE", "REDLOCK_NODES", "rediss://", "host[:port]", "SIGTERM", "SIGKILL", "EX_UNAVAILABLE", "fewer than 3 nodes"} {
		require.Contains(t, help, want)
	}
	for _, flag := range []string{
		"-nodes", "-key", "-ttl", "-wait", "-timeout", "-w", "-no-wait", "-n", "-nonblock", "-nb",
		"-conflict-exit-code", "-E", "-command", "-c", "-exclusive", "-x", "-grace", "-max-hold",
		"-foreground", "-verbose", "-quiet", "-prefix", "-fencing", "-owner", "-label", "-node-timeout", "-node-guard",
	} {
		require.Regexp(t, `(?m)^  `+flag+`\b`, help, "help run: got no %s", flag)
	}
}

// The helps of lock, status and check document their exit statuses.
func TestHelpOtherCommands(t *testing.T) {
	for cmd, tt := range map[string]struct {
		codes []int
		want  []string
	}{
		"lock":   {[]int{exitUsage, exitUnavailable, exitNotAcquired, exitLockLost}, []string{"REDLOCK_FENCE=N", "SIGTERM", "etcdctl lock", "kill $holder"}},
		"status": {[]int{0, exitUsage, exitUnavailable}, []string{"remaining_ms", "layout", "label", "owner", "count", "answered"}},
		"check":  {[]int{0, exitCheckWarning, exitUsage, exitCheckCritical, exitUnavailable}, []string{"critical", "warning", "clock_offset_ms", "findings"}},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(t.Context(), []string{"help", cmd}, &stdout, &stderr), "help %s", cmd)
		help := stdout.String()
		require.Contains(t, help, "usage: redlock "+cmd)
		for _, code := range tt.codes {
			require.Regexp(t, `(?m)^  `+strconv.Itoa(code)+` `, help, "help %s: no line for exit status %d", cmd, code)
		}
		for _, w := range tt.want {
			require.Contains(t, help, w, "help %s: got no %q", cmd, w)
		}
	}
}

func TestVersionString(t *testing.T) {
	got := versionString()
	require.True(t, strings.HasPrefix(got, "redlock dev ("), "got %q", got)
}
