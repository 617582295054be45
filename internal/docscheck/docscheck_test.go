package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// modulePathWant is the module whose docs TestDocsCiteOnlyDeclaredNames
// checks.
const modulePathWant = "github.com/redlockgo/redlock"

// moduleRoot walks up from the test's directory to the go.mod of
// modulePathWant.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if m, err := modulePath(filepath.Join(dir, "go.mod")); err == nil && m == modulePathWant {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's directory", modulePathWant)
		}
		dir = parent
	}
}

// TestDocsCiteOnlyDeclaredNames fails for each Go name that README.md or
// docs/*.md cites and the code no longer declares. When it fails after a
// rename, fix the doc: name what the code has today. Add to allowlist only
// a name that belongs to another library.
func TestDocsCiteOnlyDeclaredNames(t *testing.T) {
	root := moduleRoot(t)

	// The index must have seen the code, or every doc would pass.
	ix, err := indexDir(root)
	require.NoError(t, err)
	for _, want := range []string{"New", "fanout", "attempt", "takeable"} {
		require.Truef(t, ix.names[want], "index of %s: got no %s, want it declared", root, want)
	}
	require.True(t, ix.typed["Client.Lock"], "index: got no Client.Lock, want the method")
	require.True(t, ix.foreign["redis"], "index: got no redis import, want go-redis seen")

	drifts, err := Check(root)
	require.NoError(t, err)
	for _, d := range drifts {
		t.Error(d)
	}
}

func TestScan(t *testing.T) {
	type sp = codeSpan
	for _, tc := range []struct {
		name string
		src  string
		want []sp
	}{
		{"inline", "a `Lock` and `l.Extend(ctx)`\nthen `x`", []sp{{1, "Lock"}, {1, "l.Extend(ctx)"}, {2, "x"}}},
		{"double backticks", "``a `b` c`` and `d`", []sp{{1, "a `b` c"}, {1, "d"}}},
		{"wraps a line", "see `SET key\nvalue` and `New`", []sp{{1, "SET key value"}, {2, "New"}}},
		{"not across a blank line", "a ` stray\n\nthen `Lock`", []sp{{3, "Lock"}}},
		{"unclosed at the end", "`Lock` and ` stray", []sp{{1, "Lock"}}},
		{"fenced block", "`A`\n```go\nx := `Gone`\n```\n`B`", []sp{{1, "A"}, {5, "B"}}},
		{"tilde fence, indented in a list", "- item\n  ~~~~\n  `Gone`\n  ~~~\n  ~~~~\n`C`", []sp{{6, "C"}}},
		{"longer closing fence", "````\n`Gone`\n```\n`Gone`\n`````\n`D`", []sp{{6, "D"}}},
		{"backticks inside a fence are no span", "```\n`\n```\n`E`", []sp{{4, "E"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scan([]byte(tc.src))
			require.Equalf(t, tc.want, got, "got %v, want %v", got, tc.want)
		})
	}
}

// writeModule writes a small module with a package of its own, a Lua
// script and files, relative to the returned root.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.25\n"
	files["widget.go"] = `package m

import (
	"time"

	"example.com/m/inner"
	"github.com/redis/go-redis/v9"
)

// ALLCAPS is a Go name in capitals.
const ALLCAPS = 1

type Widget struct {
	Size int
	base
}

type base struct{ Color string }

func (w *Widget) Start() {}

type Doer interface{ Do() }

func NewWidget(opts ...int) *Widget {
	local := redis.Options{ReadTimeout: time.Second}
	_ = local
	_ = inner.Helper
	return nil
}
`
	files["inner/inner.go"] = "package inner\n\nfunc Helper() {}\n"
	files["script.lua"] = "-- local notDeclared\nlocal function takeable(key)\nend\nlocal a, b = 1, 2\n"
	files[".hidden/h.go"] = "package h\n\nfunc Hidden() {}\n"
	files["testdata/t.go"] = "package t\n\nfunc InTestdata() {}\n"
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	return root
}

func TestMissing(t *testing.T) {
	ix, err := indexDir(writeModule(t, map[string]string{}))
	require.NoError(t, err)
	for _, tc := range []struct {
		span string
		want string // "" when not reported
	}{
		// Declared, in every form.
		{"Widget", ""},
		{"*Widget", ""},
		{"NewWidget(3)", ""},
		{"Widget.Start()", ""},
		{"Widget.Size", ""},
		{"Widget.Color", ""}, // through the embedded base
		{"Doer.Do", ""},
		{"w.Start()", ""},
		{"opts", ""},
		{"local", ""},
		{"inner.Helper", ""},
		{"takeable", ""}, // Lua
		{"ReadTimeout", ""},
		{"max(a, b)", ""},
		{"Widget{Size: 1}", ""},
		// Not Go names, or not ours.
		{"PEXPIRE", ""},
		{"SET NX PX", ""},
		{"redis-server", ""},
		{"script.lua", ""},         // a file that is there
		{"inner/inner.go", ""},     // a path that is there
		{"holds.lua", "holds.lua"}, // a file that is not
		{"inner/gone.go", "inner/gone.go"},
		{"~lk:*", ""},
		{"make test", ""},
		{"go test -short ./...", ""},
		{"time.Second", ""},
		{"redis.UniversalClient", ""},
		{"errors.Is", ""}, // not imported here, but a standard package
		{"run_id", ""},
		{"select", ""},
		{"N − Q + 1", ""},
		{"Unwrap() []error", ""},
		{"Refresh", ""}, // allowlist
		// Drifts.
		{"Gone", "Gone"},
		{"gone()", "gone"},
		{"notDeclared", "notDeclared"}, // only in a Lua comment
		{"Hidden", "Hidden"},           // hidden directories are skipped
		{"InTestdata", "InTestdata"},
		{"*Gone", "Gone"},
		{"Gone(ctx, key)", "Gone"},
		{"Widget.Stop()", "Widget.Stop"},
		{"Widget.Do", "Widget.Do"}, // Doer's, not Widget's
		{"w.stop", "stop"},
		{"inner.Gone", "inner.Gone"},
		{"Elsewhere.Thing", "Elsewhere.Thing"},
	} {
		got, reported := ix.missing(tc.span)
		if got != tc.want || reported != (tc.want != "") {
			t.Errorf("missing(%q): got %q, %v; want %q, %v", tc.span, got, reported, tc.want, tc.want != "")
		}
	}
}

// TestCheckReportsEachDrift is the check's own negative control: a doc that
// cites a name the code lacks is reported, at its file and line.
func TestCheckReportsEachDrift(t *testing.T) {
	root := writeModule(t, map[string]string{
		"README.md":  "# M\n\nCall `NewWidget`, then\n`Widget.Stop()`.\n\n```go\nGone()\n```\n",
		"docs/A.md":  "`PEXPIRE` and `Gone` and\n`errors.Is`\n",
		"docs/B.txt": "`Gone`\n",
	})
	drifts, err := Check(root)
	require.NoError(t, err)
	var got []string
	for _, d := range drifts {
		got = append(got, d.String())
	}
	want := []string{
		"README.md:4: `Widget.Stop()`: Widget.Stop is not declared in the code",
		"docs/A.md:1: `Gone` is not declared in the code",
	}
	require.Truef(t, slices.Equal(got, want), "got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
}

func TestCheckFailsOnBadGo(t *testing.T) {
	root := writeModule(t, map[string]string{"bad.go": "package m\n\nfunc {\n"})
	_, err := Check(root)
	require.Error(t, err, "got no error for a file that does not parse, want one")
}

func TestImportName(t *testing.T) {
	for path, want := range map[string]string{
		"time":                                   "time",
		"log/slog":                               "slog",
		"github.com/redis/go-redis/v9":           "redis",
		"github.com/alicebob/miniredis/v2":       "miniredis",
		"github.com/go-redsync/redsync/v4":       "redsync",
		"gopkg.in/yaml.v3":                       "yaml",
		"go.opentelemetry.io/otel/metric":        "metric",
		"github.com/stretchr/testify/require":    "require",
		"github.com/go-redsync/redsync/v4/redis": "redis",
	} {
		if got := importName(path); got != want {
			t.Errorf("importName(%q): got %q, want %q", path, got, want)
		}
	}
}
