package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is redlock's version. Releases set it at build time, and it then
// wins over the build info:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/redlock
//
// Otherwise it is "dev", and the module version from the build info is
// shown in its place when there is one: go install's (v1.2.3), or the
// pseudo-version that go build derives from a git checkout
// (v0.0.0-20260101120000-1a2b3c4d5e6f). The commit is shown either way when
// the build recorded it, as go build does in a git checkout unless
// -buildvcs=false.
var version = "dev"

func versionCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: redlock version")
		return exitUsage
	}
	fmt.Fprintln(stdout, versionString())
	return exitOK
}

func versionHelp(w io.Writer) {
	fmt.Fprint(w, `usage: redlock version

Version prints redlock's version, the commit it was built from when the
build recorded it, and the Go version and platform.
`)
}

// versionString is one line: "redlock v1.2.3 (commit 1a2b3c4d5e6f, go1.26.0
// linux/amd64)".
func versionString() string {
	v := version
	var details []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if m := bi.Main.Version; v == "dev" && m != "" && m != "(devel)" {
			v = m
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			c := "commit " + rev[:min(12, len(rev))]
			if modified == "true" {
				c += ", modified"
			}
			details = append(details, c)
		}
	}
	details = append(details, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return fmt.Sprintf("redlock %s (%s)", v, strings.Join(details, ", "))
}
