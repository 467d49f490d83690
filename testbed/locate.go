package testbed

import (
	"fmt"
	"regexp"
	"strings"
)

// locator maps key paths of a TOML file to the line they are written on, so
// that errors found after decoding (an unknown broker in a fault, a rate ≤ 0)
// can name the line. The TOML decoder keeps one position per key name, not
// per element of an array of tables, so we keep our own index; it
// understands what experiment files use: [table], [[array]], key = value,
// dotted keys and one-line inline tables. Paths look like "overlay.delta",
// "faults[1].crash" (0-based), "publishers[0].attrs.price".
type locator struct {
	lines map[string]int
	order []string // paths in file order, for lookups by pattern
}

var (
	reTable    = regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.\-" ]+?)\s*\]\s*(#.*)?$`)
	reArrTable = regexp.MustCompile(`^\s*\[\[\s*([A-Za-z0-9_.\-" ]+?)\s*\]\]\s*(#.*)?$`)
	reKey      = regexp.MustCompile(`^\s*([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*=(.*)$`)
	reInline   = regexp.MustCompile(`([A-Za-z0-9_\-]+)\s*=`)
)

func newLocator(src string) *locator {
	l := &locator{lines: map[string]int{}}
	counts := map[string]int{}
	prefix := ""
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		if m := reArrTable.FindStringSubmatch(line); m != nil {
			name := strings.ReplaceAll(m[1], " ", "")
			prefix = fmt.Sprintf("%s[%d]", name, counts[name])
			counts[name]++
			l.add(prefix, n)
			continue
		}
		if m := reTable.FindStringSubmatch(line); m != nil {
			prefix = strings.ReplaceAll(m[1], " ", "")
			l.add(prefix, n)
			continue
		}
		m := reKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := strings.ReplaceAll(m[1], " ", "")
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		l.add(path, n)
		if rest := strings.TrimSpace(m[2]); strings.HasPrefix(rest, "{") {
			// Keys of a one-line inline table; values that contain "x ="
			// inside quotes would be picked up too, which only adds
			// entries nobody asks for.
			for _, im := range reInline.FindAllStringSubmatch(rest, -1) {
				l.add(path+"."+im[1], n)
			}
		}
	}
	return l
}

func (l *locator) add(path string, line int) {
	if _, dup := l.lines[path]; !dup {
		l.lines[path] = line
		l.order = append(l.order, path)
	}
}

// has reports whether the file writes the key at path.
func (l *locator) has(path string) bool {
	if l == nil {
		return false
	}
	_, ok := l.lines[path]
	return ok
}

// line returns the line of path, falling back to its closest written
// parent (the table the key would be in), or 0 when nothing is known.
func (l *locator) line(path string) int {
	if l == nil {
		return 0
	}
	for p := path; p != ""; {
		if n, ok := l.lines[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// lineOfKey finds a key the TOML decoder reports without array indexes
// (MetaData.Undecoded gives ["faults","bogus"] for a key in any [[faults]]):
// the first path that matches it once indexes are dropped.
func (l *locator) lineOfKey(parts []string) (int, string) {
	want := strings.Join(parts, ".")
	for _, p := range l.order {
		if stripIndexes(p) == want {
			return l.lines[p], p
		}
	}
	return 0, want
}

var reIndex = regexp.MustCompile(`\[\d+\]`)

func stripIndexes(p string) string { return reIndex.ReplaceAllString(p, "") }
