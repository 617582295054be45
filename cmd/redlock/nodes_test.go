package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

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
		"u:p@h":                       "u:p@h",
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
		{"no scheme", []string{"--nodes", "h:6379", "--key", "k", "true"}, []string{`bad node URL "h:6379": want redis://host:port`}, ""},
		{"port", []string{"--nodes", "redis://u:hunter2@h:port", "--key", "k", "true"}, []string{`bad node URL "redis://u:xxxxx@h:port"`, "invalid port"}, "hunter2"},
		{"database", []string{"--nodes", "redis://h/abc", "--key", "k", "true"}, []string{`bad node URL "redis://h/abc": redis: invalid database number: "abc"`}, ""},
		{"option", []string{"--nodes", "redis://h?bogus=1", "--key", "k", "true"}, []string{`bad node URL "redis://h?bogus=1"`, "bogus"}, ""},
		{"empty URL", []string{"--nodes", ok + ",,redis://h:2", "--key", "k", "true"}, []string{"--nodes: URL 2 is empty"}, ""},
		{"same server twice", []string{"--nodes", ok + "," + ok, "--key", "k", "true"}, []string{"same server"}, ""},
		{"no key", []string{"--nodes", ok, "true"}, []string{"-key is required"}, ""},
		{"no command", []string{"--nodes", ok, "--key", "k"}, []string{"no command given"}, ""},
		{"wait and no-wait", []string{"--nodes", ok, "--key", "k", "--wait", "1s", "--no-wait", "true"}, []string{"exclude each other"}, ""},
		{"ttl", []string{"--nodes", ok, "--key", "k", "--ttl", "0s", "true"}, []string{"-ttl must be positive, got 0s"}, ""},
		{"grace", []string{"--nodes", ok, "--key", "k", "--grace", "-1s", "true"}, []string{"-grace must be positive, got -1s"}, ""},
		{"unknown flag", []string{"--bogus"}, []string{"flag provided but not defined: -bogus", "usage: redlock run", "Exit status:"}, ""},
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

func TestStatusCommandUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", "k"}, "no nodes"},
		{[]string{"--nodes", "redis://h"}, "-key is required"},
		{[]string{"--nodes", "redis://h", "--key", "k", "extra"}, `unexpected argument "extra"`},
		{[]string{"--nodes", "redis://h", "--key", "k", "--timeout", "0s"}, "-timeout must be positive"},
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
	for _, code := range []int{exitUsage, exitNotAcquired, exitLockLost, exitCannotRun, exitNotFound} {
		require.Regexp(t, `(?m)^  `+strconv.Itoa(code)+` `, help, "help run: no line for exit status %d", code)
	}
	for _, want := range []string{"128+N", "REDLOCK_KEY", "REDLOCK_TOKEN", "REDLOCK_NODES", "rediss://", "SIGTERM", "SIGKILL"} {
		require.Contains(t, help, want)
	}
	for _, flag := range []string{"-nodes", "-key", "-ttl", "-wait", "-no-wait", "-grace", "-max-hold", "-foreground", "-verbose", "-prefix"} {
		require.Regexp(t, `(?m)^  `+flag+`\b`, help, "help run: got no %s", flag)
	}
}

func TestVersionString(t *testing.T) {
	got := versionString()
	require.True(t, strings.HasPrefix(got, "redlock dev ("), "got %q", got)
}
