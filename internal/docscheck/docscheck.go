// Package docscheck finds the names that the docs cite and the code no
// longer declares, so that a rename in the code fails a test until the docs
// follow it.
//
// Check reads README.md and docs/*.md at the module root and looks at every
// code span (text between backticks, outside fenced code blocks). A span is
// taken as a Go name when all of these hold:
//
//   - It is Name or Qual.Name, optionally led by * and followed by one
//     balanced (...) or {...}: `Lock`, `*NodeError`, `Lock.Token()`,
//     `l.Extend(ctx)`, `redlock.New(nodes)`. Anything else (`SET NX PX`,
//     `go test ./...`, `~lk:*`, `N − Q`) is a command, a pattern or a
//     formula. Only the head is checked, not the arguments.
//   - It is not all capitals (`PEXPIRE`, `KEYS`, `M1`: Redis words and
//     math), nor snake_case (`run_id`: Redis INFO fields), nor a Go keyword
//     (`go`, `select`). All-capital Go names exist but are not checked.
//   - It is not a file name: Name.ext with a known ext (`holds.lua`,
//     `node.go`, `go.mod`). File names are checked apart: a path with a
//     slash (`scripts/acquire.lua`, `cmd/redlock/run.go`) must exist under
//     the root, and a bare name (`quorum.go`) must be the name of some file
//     in the repository, so that a doc that names a file which was moved or
//     removed fails too.
//   - Its qualifier is not a package that the code imports from outside the
//     module, nor a common standard package (`time.Second`, `errors.Is`,
//     `redis.UniversalClient`, `slog.Logger`): those are not ours to check.
//
// The code declares a name when any .go file under the root declares it as
// a func, method, type, struct field, interface method, const, var
// (package-level or local), parameter or package name. Test files and the
// nested modules count; .git, testdata and hidden directories don't. The
// functions and locals of the .lua scripts count too, since the docs cite
// them the same way (`takeable`, `expireAtLeast`). So do Go's predeclared
// names (`max`), the names of imported packages (`goleak`), and the names
// that the code uses from them: Name in pkg.Name, and the keys of a
// pkg.Type{...} literal (`ContextTimeoutEnabled` of redis.Options).
//
// The qualifier decides where Qual.Name must be found. For one of our
// packages (`redlock.New`), at its top level. For one of our types
// (`Lock.Token`), as a method or field of that type or of a type it
// embeds. For a lower-case variable (`l.Extend`, `ctx.Err`), as a method or
// field of any type. An upper-case qualifier that is none of these is
// reported with its name.
//
// The rest, names the docs cite from other libraries (Redisson,
// bsm/redislock, methods of go-redis and miniredis values) and a few plain
// words, are in allowlist.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// allowlist holds the names that the docs cite on purpose although nothing
// here declares them, grouped by where they come from; for Type.Member it
// holds the pair. Prefer fixing the doc; add an entry only for a name that
// belongs to another library, or a word that is not a name.
var allowlist = words(
	// Redisson, in README.md's comparison and docs/RWLOCK.md.
	"RedissonRedLock RReadWriteLock tryLock lockInterruptibly forceUnlock isLocked remainTimeToLive",
	// bsm/redislock and redsync, in README.md's comparison.
	"Obtain Refresh TTL Release Metadata Options.Metadata ErrNotObtained ErrLockNotHeld NewMutex",
	// Methods of go-redis and miniredis values (no pkg.Name in our code
	// shows them), go-redis's pool internals, and testing.T's Log.
	"Pipeline AutoPipeline Get connCheck FastForward SetTime SetError ClockTTL Log",
	// Plain words: tools, syscalls, Redis settings, a key, a layout.
	"sudo flock recvfrom noeviction maxmemory makestep acct semaphore",
)

// stdPackages are standard packages whose qualifier is skipped even when no
// file imports them; the imported ones are skipped anyway.
var stdPackages = words("bufio bytes context errors exec filepath fmt http io json maps math net os rand " +
	"runtime slices slog sort strconv strings sync atomic testing time unicode utf8")

// words makes a set of the space-separated names in lists.
func words(lists ...string) map[string]bool {
	set := map[string]bool{}
	for _, l := range lists {
		for _, w := range strings.Fields(l) {
			set[w] = true
		}
	}
	return set
}

// Drift is a Go name that a doc cites and the code does not declare.
type Drift struct {
	File string // the doc, relative to the module root
	Line int    // 1-based line of the span's opening backtick
	Span string // the code span as written
	Name string // the part of Span that is not declared
	// NoFile is set when Span names a file that is not there.
	NoFile bool
}

// String formats d as file:line: message, the form test failures print.
func (d Drift) String() string {
	if d.NoFile {
		return fmt.Sprintf("%s:%d: `%s`: no such file", d.File, d.Line, d.Span)
	}
	if d.Name == d.Span {
		return fmt.Sprintf("%s:%d: `%s` is not declared in the code", d.File, d.Line, d.Span)
	}
	return fmt.Sprintf("%s:%d: `%s`: %s is not declared in the code", d.File, d.Line, d.Span, d.Name)
}

// Check parses every .go and .lua file under root, the module root, and
// returns the names that README.md and docs/*.md cite but the code does not
// declare, in file and line order. It returns an error when a file can't be
// read or a .go file does not parse; the drifts are then not known.
func Check(root string) ([]Drift, error) {
	ix, err := indexDir(root)
	if err != nil {
		return nil, err
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(docs)
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	var drifts []Drift
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, doc)
		if err != nil {
			return nil, err
		}
		for _, s := range scan(src) {
			if name, ok := ix.missing(s.text); ok {
				isFile, _ := ix.missingFile(s.text)
				drifts = append(drifts, Drift{File: filepath.ToSlash(rel), Line: s.line, Span: s.text, Name: name, NoFile: isFile})
			}
		}
	}
	return drifts, nil
}

// index is what the code declares.
type index struct {
	names   map[string]bool            // every declared name
	members map[string]bool            // methods, fields, interface methods
	typed   map[string]bool            // "Type.Member"
	types   map[string]bool            // declared types
	embeds  map[string][]string        // type -> the types it embeds
	pkgs    map[string]map[string]bool // our package -> its top-level names
	foreign map[string]bool            // packages imported from outside the module
	used    map[string]bool            // names used from those packages
	root    string                     // the module root
	files   map[string]bool            // the base name of every file
}

func newIndex() *index {
	return &index{
		names:   map[string]bool{},
		members: map[string]bool{},
		typed:   map[string]bool{},
		types:   map[string]bool{},
		embeds:  map[string][]string{},
		pkgs:    map[string]map[string]bool{},
		foreign: map[string]bool{},
		used:    map[string]bool{},
		files:   map[string]bool{},
	}
}

// indexDir indexes every .go file under root.
func indexDir(root string) (*index, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	ix := newIndex()
	ix.root = root
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		ix.files[d.Name()] = true
		if strings.HasSuffix(path, ".lua") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			ix.addLua(src)
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ix.addFile(f, module)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ix, nil
}

// modulePath reads the module line of a go.mod.
func modulePath(gomod string) (string, error) {
	src, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("docscheck: no module line in %s", gomod)
}

func (ix *index) addFile(f *ast.File, module string) {
	pkg := f.Name.Name
	ix.names[pkg] = true
	top := ix.pkgs[pkg]
	if top == nil {
		top = map[string]bool{}
		ix.pkgs[pkg] = top
	}
	imported := map[string]bool{} // this file's foreign packages
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		if path == module || strings.HasPrefix(path, module+"/") {
			continue
		}
		name := importName(path)
		if imp.Name != nil && imp.Name.Name != "_" && imp.Name.Name != "." {
			name = imp.Name.Name
		}
		ix.foreign[name] = true
		imported[name] = true
	}
	isForeign := func(e ast.Expr) bool {
		if u, ok := e.(*ast.UnaryExpr); ok {
			e = u.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && imported[id.Name]
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				top[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					top[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						top[n.Name] = true
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			ix.names[n.Name.Name] = true
			if n.Recv != nil && len(n.Recv.List) == 1 {
				ix.members[n.Name.Name] = true
				if t := typeName(n.Recv.List[0].Type); t != "" {
					ix.typed[t+"."+n.Name.Name] = true
				}
			}
		case *ast.TypeSpec:
			t := n.Name.Name
			ix.names[t] = true
			ix.types[t] = true
			var fields []*ast.Field
			switch st := n.Type.(type) {
			case *ast.StructType:
				fields = st.Fields.List
			case *ast.InterfaceType:
				fields = st.Methods.List
			}
			for _, fl := range fields {
				if len(fl.Names) == 0 { // embedded
					if e := typeName(fl.Type); e != "" {
						ix.typed[t+"."+e] = true
						ix.embeds[t] = append(ix.embeds[t], e)
					}
				}
				for _, fn := range fl.Names {
					ix.typed[t+"."+fn.Name] = true
				}
			}
		case *ast.StructType:
			ix.addFields(n.Fields, true)
		case *ast.InterfaceType:
			ix.addFields(n.Methods, true)
		case *ast.FuncType:
			ix.addFields(n.Params, false)
			ix.addFields(n.Results, false)
		case *ast.ValueSpec:
			for _, id := range n.Names {
				ix.names[id.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						ix.names[id.Name] = true
					}
				}
			}
		case *ast.SelectorExpr:
			if isForeign(n) {
				ix.used[n.Sel.Name] = true
			}
		case *ast.CompositeLit:
			if isForeign(n.Type) {
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if id, ok := kv.Key.(*ast.Ident); ok {
							ix.used[id.Name] = true
						}
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						ix.names[id.Name] = true
					}
				}
			}
		}
		return true
	})
}

// luaFunc matches a Lua function's name, and luaLocal the names a local
// statement declares ("function" when it declares a function).
var (
	luaFunc    = regexp.MustCompile(`\bfunction\s+([A-Za-z_][A-Za-z0-9_]*)`)
	luaComment = regexp.MustCompile(`--.*`)
	luaLocal   = regexp.MustCompile(`\blocal\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)`)
)

// addLua records the functions and locals a Lua script declares.
func (ix *index) addLua(src []byte) {
	src = luaComment.ReplaceAll(src, nil)
	for _, m := range luaFunc.FindAllSubmatch(src, -1) {
		ix.names[string(m[1])] = true
	}
	for _, m := range luaLocal.FindAllSubmatch(src, -1) {
		for _, n := range strings.Split(string(m[1]), ",") {
			if n = strings.TrimSpace(n); n != "function" {
				ix.names[n] = true
			}
		}
	}
}

// addFields records the names of a field list; member says whether they
// are fields or methods (rather than parameters).
func (ix *index) addFields(fl *ast.FieldList, member bool) {
	if fl == nil {
		return
	}
	for _, f := range fl.List {
		names := f.Names
		if len(names) == 0 && member {
			if e := typeName(f.Type); e != "" {
				names = []*ast.Ident{{Name: e}}
			}
		}
		for _, id := range names {
			ix.names[id.Name] = true
			if member {
				ix.members[id.Name] = true
			}
		}
	}
}

// typeName is the name of the type in a receiver or an embedded field:
// T, *T, T[P], pkg.T.
func typeName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x.Name
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		default:
			return ""
		}
	}
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// importName guesses the name a package is imported under from its path, as
// the go tool's convention goes: the last element, skipping a major version
// (go-redis/v9) and dropping a go- prefix, a -go suffix and a .vN suffix
// (gopkg.in/yaml.v3).
func importName(path string) string {
	elems := strings.Split(path, "/")
	name := elems[len(elems)-1]
	if majorVersion.MatchString(name) && len(elems) > 1 {
		name = elems[len(elems)-2]
	}
	if i := strings.Index(name, ".v"); i > 0 {
		name = name[:i]
	}
	name = strings.TrimPrefix(name, "go-")
	name = strings.TrimSuffix(name, "-go")
	return name
}

// fileExts are the extensions that make Name.ext a file name.
var fileExts = map[string]bool{
	"go": true, "lua": true, "md": true, "svg": true, "yml": true, "yaml": true,
	"mod": true, "sum": true, "json": true, "txt": true, "sh": true,
}

// ref is Name, Qual.Name, optionally led by * and followed by (...) or {...}
// whose balance refHead checks.
var ref = regexp.MustCompile(`^\*?([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?([({].*)?$`)

// parseRef splits a span into its qualifier and name, and reports whether
// the span is a reference at all under the grammar in the package doc.
func parseRef(s string) (qual, name string, ok bool) {
	m := ref.FindStringSubmatch(s)
	if m == nil || !balanced(m[3]) {
		return "", "", false
	}
	if m[2] == "" {
		return "", m[1], true
	}
	return m[1], m[2], true
}

// balanced reports whether tail is empty or one bracketed group: it opens
// with ( or { and that bracket closes at its last byte.
func balanced(tail string) bool {
	if tail == "" {
		return true
	}
	depth := 0
	for i, r := range tail {
		switch r {
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
			if depth == 0 {
				return i == len(tail)-1
			}
			if depth < 0 {
				return false
			}
		}
	}
	return false
}

// notGo reports whether full, a name or qual.name, is written as no Go
// name is: all capitals, snake_case, or a keyword.
func notGo(full string) bool {
	lower, upper := false, false
	for _, r := range full {
		lower = lower || unicode.IsLower(r)
		upper = upper || unicode.IsUpper(r)
	}
	return !lower || !upper && strings.Contains(full, "_") || token.IsKeyword(full)
}

// filePath matches a span that names a file: a path of plain characters
// ending in one of fileExts.
var filePath = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.([a-z]+)$`)

// missingFile reports whether span names a file, and whether that file is
// missing: a path with a slash is looked up under the root, a bare name
// among the names of the repository's files.
func (ix *index) missingFile(span string) (isFile, missing bool) {
	m := filePath.FindStringSubmatch(span)
	if m == nil || !fileExts[m[2]] {
		return false, false
	}
	if allowlist[span] {
		return true, false
	}
	if strings.Contains(span, "/") {
		_, err := os.Stat(filepath.Join(ix.root, filepath.FromSlash(span)))
		return true, err != nil
	}
	return true, !ix.files[span]
}

// missing reports whether span is a Go reference that the code does not
// declare, or a file that is not there, and if so which part is missing.
func (ix *index) missing(span string) (string, bool) {
	if isFile, miss := ix.missingFile(span); isFile {
		if miss {
			return span, true
		}
		return "", false
	}
	qual, name, ok := parseRef(span)
	if !ok {
		return "", false
	}
	full := name
	if qual != "" {
		full = qual + "." + name
	}
	if qual != "" && fileExts[name] || notGo(full) {
		return "", false
	}
	miss := ix.resolve(qual, name)
	if miss == "" || allowlist[miss] {
		return "", false
	}
	return miss, true
}

// resolve returns "" when qual.name is declared, else the part that is not.
func (ix *index) resolve(qual, name string) string {
	if qual == "" {
		if ix.names[name] || ix.used[name] || ix.foreign[name] || types.Universe.Lookup(name) != nil {
			return ""
		}
		return name
	}
	if top, ok := ix.pkgs[qual]; ok && top[name] {
		return ""
	}
	if ix.foreign[qual] || stdPackages[qual] {
		return ""
	}
	if _, ok := ix.pkgs[qual]; ok {
		return qual + "." + name
	}
	if ix.types[qual] {
		if ix.hasMember(qual, name, 0) {
			return ""
		}
		return qual + "." + name
	}
	if unicode.IsUpper(rune(qual[0])) {
		return qual + "." + name
	}
	if ix.members[name] {
		return ""
	}
	return name
}

// hasMember reports whether type t, or a type it embeds, has member m.
func (ix *index) hasMember(t, m string, depth int) bool {
	if ix.typed[t+"."+m] {
		return true
	}
	if depth > 8 {
		return false
	}
	for _, e := range ix.embeds[t] {
		if ix.hasMember(e, m, depth+1) {
			return true
		}
	}
	return false
}

// codeSpan is the text of one code span and the line it starts on.
type codeSpan struct {
	line int
	text string
}

// scan returns the code spans of a Markdown document, outside fenced code
// blocks. A span is a run of n backticks, its text, then a run of exactly n
// backticks; it may wrap lines, but not cross a blank line. Its text is
// returned with newlines as spaces, trimmed.
func scan(src []byte) []codeSpan {
	lines := strings.Split(string(src), "\n")
	// Blank the fenced blocks so that offsets still give line numbers.
	var fence string
	for i, l := range lines {
		t := strings.TrimLeft(l, " \t")
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]+" \t\r") == "" {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		for _, c := range []string{"`", "~"} {
			if strings.HasPrefix(t, c+c+c) {
				n := len(t) - len(strings.TrimLeft(t, c))
				fence = strings.Repeat(c, n)
				lines[i] = ""
			}
		}
	}
	text := strings.Join(lines, "\n")
	var spans []codeSpan
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := runLen(text, i)
		end := closing(text, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		body := strings.TrimSpace(strings.ReplaceAll(text[i+n:end], "\n", " "))
		spans = append(spans, codeSpan{line: 1 + strings.Count(text[:i], "\n"), text: body})
		i = end + n
	}
	return spans
}

// runLen is the length of the run of backticks at text[i].
func runLen(text string, i int) int {
	n := 0
	for i+n < len(text) && text[i+n] == '`' {
		n++
	}
	return n
}

// closing returns the offset of the next run of exactly n backticks from
// text[i], or -1 when a blank line or the end comes first.
func closing(text string, i, n int) int {
	for i < len(text) {
		switch text[i] {
		case '`':
			m := runLen(text, i)
			if m == n {
				return i
			}
			i += m
		case '\n':
			j := i + 1
			for j < len(text) && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r') {
				j++
			}
			if j >= len(text) || text[j] == '\n' {
				return -1
			}
			i++
		default:
			i++
		}
	}
	return -1
}
