package collector

// The scrape's fast path: the cluster families written straight to text
// from the collectors' samples, without building client_golang const
// metrics and protobuf families only to sort and encode them again. The
// output is byte for byte what client_golang's Gather and expfmt's encoders
// write for the same samples (text 0.0.4 and OpenMetrics 1.0): families by
// name, a family's series by their label values in label-name order, a
// repeated label set dropped after its first series. TestTextMatchesGather
// holds the two paths equal.

import (
	"bytes"
	"cmp"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// sample is one series of a gauge family, as a collector emitted it.
type sample struct {
	def *Def
	v   float64
	lvs []string
}

// Family is one family's exposition: its HELP and TYPE lines and series,
// in Text and then, for a family of rows, one line each.
type Family struct {
	Name string
	def  *Def
	// text and lines are the exposition in the text format; om converts
	// it to OpenMetrics as it is written.
	text  []byte
	lines lineSeq
	om    bool
}

// WriteTo writes the family's exposition.
func (f Family) WriteTo(w io.Writer) (int64, error) {
	if !f.om {
		n, err := w.Write(f.text)
		total := int64(n)
		for l := range f.lines.all {
			if err != nil {
				break
			}
			n, err = w.Write(l.text)
			total += int64(n)
		}
		return total, err
	}
	// Converted in chunks of about 64 KiB.
	var total int64
	buf := make([]byte, 0, 80<<10)
	flush := func() error {
		n, err := w.Write(buf)
		total += int64(n)
		buf = buf[:0]
		return err
	}
	for text := f.text; len(text) > 0; {
		i := bytes.IndexByte(text, '\n') + 1
		buf = appendOpenMetricsLine(buf, text[:i])
		text = text[i:]
		if len(buf) >= 64<<10 {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	for l := range f.lines.all {
		buf = appendOpenMetricsLine(buf, l.text)
		if len(buf) >= 64<<10 {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	return total, flush()
}

// AppendTo appends the family's exposition to buf.
func (f Family) AppendTo(buf []byte) []byte {
	if !f.om {
		buf = append(buf, f.text...)
		for l := range f.lines.all {
			buf = append(buf, l.text...)
		}
		return buf
	}
	for text := f.text; len(text) > 0; {
		i := bytes.IndexByte(text, '\n') + 1
		buf = appendOpenMetricsLine(buf, text[:i])
		text = text[i:]
	}
	for l := range f.lines.all {
		buf = appendOpenMetricsLine(buf, l.text)
	}
	return buf
}

// appendOpenMetricsLine appends one line of text exposition (with its
// newline) as OpenMetrics 1.0 writes it, as client_golang would: the two
// differ, for gauges, in HELP, where OpenMetrics also escapes double
// quotes, and in integral values, which OpenMetrics writes with ".0". The
// cache holds one format, so that scrapes in both take turns without
// rendering everything again.
func appendOpenMetricsLine(buf, line []byte) []byte {
	if bytes.HasPrefix(line, []byte("# HELP ")) {
		for _, c := range line {
			if c == '"' {
				buf = append(buf, '\\')
			}
			buf = append(buf, c)
		}
		return buf
	}
	body := line[:len(line)-1]
	if len(body) == 0 || body[0] == '#' {
		return append(buf, line...)
	}
	buf = append(buf, body...)
	switch v := body[bytes.LastIndexByte(body, ' ')+1:]; {
	case bytes.ContainsAny(v, "e."), string(v) == "NaN", string(v) == "+Inf", string(v) == "-Inf":
	default:
		buf = append(buf, '.', '0')
	}
	return append(buf, '\n')
}

// Prerender renders the families once and drops them: called when the
// informers have synced, so that the first scrape writes what is ready
// instead of rendering everything (seconds at 100k claims, past
// Prometheus' default scrape timeout). A scrape that comes meanwhile waits
// for it and is then written from it.
func (x *Exporter) Prerender() time.Duration {
	start := time.Now()
	x.TextFamilies(false)
	return time.Since(start)
}

// TextFamilies runs the collectors over one snapshot, as Collect does, and
// returns each family with series as text exposition, sorted by name;
// openMetrics selects the OpenMetrics 1.0 syntax (without the final # EOF,
// which ends the whole response). While the index hands out the same
// snapshot, or one where nothing a pure collector reads changed, its
// families are written from the last scrape's text instead of being
// rendered again (textCache); concurrent calls take turns.
func (x *Exporter) TextFamilies(openMetrics bool) []Family {
	c := &x.text
	c.mu.Lock()
	defer c.mu.Unlock()
	type run struct {
		i       int // the collector; -1 for the timing series
		samples []sample
	}
	var runs []run
	var reused []int
	// The snapshot and time each collector ran over (the verdict
	// collectors may read a held one).
	snaps := map[int]*index.Snapshot{}
	times := map[int]time.Time{}
	c.reset(x)
	x.each(func(i int, s *index.Snapshot, t time.Time) step {
		snaps[i], times[i] = s, t
		if c.reusable(x, i, s, t) {
			reused = append(reused, i)
			return step{skip: true}
		}
		if rowc, ok := x.collectors[i].(rowCollector); ok && c.cacheable(x, i) {
			// Only the rows of changed objects are rendered.
			rc := c.rowCache(i)
			var lines map[*Def]lineSeq
			return step{
				work: func() (err error) {
					lines, err = rc.render(x, rowc, s)
					return err
				},
				done: func() {
					c.keepRows(i, lines, s)
					reused = append(reused, i)
				},
			}
		}
		return step{}
	}, func(i int, samples []sample) {
		runs = append(runs, run{i, samples})
	})
	count := map[*Def]int{}
	fresh := map[*Def]bool{} // families with a series from a run that is not kept
	for _, r := range runs {
		kept := r.i >= 0 && c.cacheable(x, r.i) && c.keep(x, r.i, r.samples, snaps[r.i], times[r.i])
		for _, s := range r.samples {
			count[s.def]++
			if !kept {
				fresh[s.def] = true
			}
		}
	}
	byDef := make(map[*Def][]sample, len(count))
	for d, n := range count {
		byDef[d] = make([]sample, 0, n)
	}
	for _, r := range runs {
		for _, s := range r.samples {
			byDef[s.def] = append(byDef[s.def], s)
		}
	}
	out := make([]Family, 0, len(byDef))
	for _, i := range reused {
		for _, d := range x.collectors[i].Defs() {
			if t, ok := c.text[d]; ok {
				out = append(out, Family{Name: d.Name, def: d, text: t, lines: c.lines[d], om: openMetrics})
			}
		}
	}
	for d, samples := range byDef {
		text := d.appendText(nil, samples)
		if fresh[d] {
			// Another collector wrote into the family: its owner must
			// run again next time.
			if o, ok := c.owner[d]; ok {
				delete(c.done, o)
			}
		} else {
			c.store(d, text)
		}
		out = append(out, Family{Name: d.Name, def: d, text: text, om: openMetrics})
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// step is how each handles one collector: skip it (its series are at
// hand), run work instead of the collector, or (the zero step) run the
// collector. work may run while other collectors do and must keep to its
// own state; done, called in collector order once work succeeded, keeps
// what it made.
type step struct {
	skip bool
	work func() error
	done func()
}

// each runs every collector over one snapshot and hands the samples of
// each that succeeded, and the timing series (collector -1), to emit, in
// collector order. plan, when set, is asked first, in collector order, how
// to handle collector i for the snapshot at now; a skipped collector
// reports only timing. The collectors run side by side, as many at once as
// there are processors: a snapshot is read-only and its memos lock, and at
// 100k claims a scrape that renders everything is seconds of CPU.
func (x *Exporter) each(plan func(i int, s *index.Snapshot, now time.Time) step, emit func(i int, samples []sample)) {
	if x.complete != nil && !x.complete() {
		return
	}
	s := x.src.Snapshot()
	now := x.now()
	vs, vnow := x.verdictView(s, now)
	type outcome struct {
		runs    bool
		step    step
		samples []sample
		err     error
		took    time.Duration
	}
	out := make([]outcome, len(x.collectors))
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, c := range x.collectors {
		if !x.shardRuns(c) {
			continue
		}
		s, now := s, now
		if _, ok := c.(verdictCollector); ok {
			if s, now = vs, vnow; s == nil {
				continue // held, and nothing to hold yet
			}
		}
		o := &out[i]
		o.runs = true
		if plan != nil {
			start := time.Now()
			o.step = plan(i, s, now)
			o.took = time.Since(start)
		}
		if o.step.skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			start := time.Now()
			defer func() {
				// work's own panics (a collector's are recovered in run).
				if r := recover(); r != nil {
					o.samples, o.err = nil, panicError{value: r, stack: debug.Stack()}
				}
				o.took += time.Since(start)
			}()
			if o.step.work != nil {
				o.err = o.step.work()
				return
			}
			var e *emitter
			if e, o.err = x.run(c, s, now); o.err == nil {
				o.samples = e.samples
			}
		}()
	}
	wg.Wait()
	for i, c := range x.collectors {
		o := &out[i]
		if !o.runs {
			continue
		}
		switch {
		case o.err != nil:
			x.logFailure(c, o.err)
		case o.step.work != nil:
			if o.step.done != nil {
				o.step.done()
			}
		case !o.step.skip:
			emit(i, o.samples)
		}
		if x.timing {
			emit(-1, []sample{
				{def: scrapeDuration, v: o.took.Seconds(), lvs: []string{c.Name()}},
				{def: scrapeSuccess, v: boolFloat(o.err == nil), lvs: []string{c.Name()}},
			})
		}
	}
}

// labelOrder returns the positions of the family's labels sorted by name:
// the order client_golang writes and sorts label pairs in.
func (d *Def) labelOrder() []int {
	d.orderOnce.Do(func() {
		d.order = make([]int, len(d.Labels))
		for i := range d.order {
			d.order[i] = i
		}
		slices.SortStableFunc(d.order, func(a, b int) int { return strings.Compare(d.Labels[a], d.Labels[b]) })
	})
	return d.order
}

func (d *Def) appendText(buf []byte, samples []sample) []byte {
	order := d.labelOrder()
	// A stable order by label values: pdqsort on positions, ties broken by
	// position (the stable sort's in-place merging was a third of a
	// scrape's time at 100k claims).
	pos := make([]int32, len(samples))
	for i := range pos {
		pos[i] = int32(i)
	}
	slices.SortFunc(pos, func(a, b int32) int {
		la, lb := samples[a].lvs, samples[b].lvs
		for _, i := range order {
			if c := strings.Compare(la[i], lb[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	if buf == nil {
		// The first series' length, times the series, and some room.
		buf = make([]byte, 0, 128+len(d.Help)+len(samples)*(lineLength(d, samples[0])+8))
	}
	buf = d.appendHeader(buf)
	for k, p := range pos {
		if k > 0 && slices.Equal(samples[p].lvs, samples[pos[k-1]].lvs) {
			continue // a repeated label set: Gather keeps the first
		}
		buf = d.appendLine(buf, samples[p])
	}
	return buf
}

// appendHeader writes the family's HELP and TYPE lines.
func (d *Def) appendHeader(buf []byte) []byte {
	buf = append(buf, "# HELP "...)
	buf = append(buf, d.Name...)
	buf = append(buf, ' ')
	buf = appendEscaped(buf, d.Help, false)
	buf = append(buf, "\n# TYPE "...)
	buf = append(buf, d.Name...)
	buf = append(buf, ' ')
	buf = append(buf, d.Type...)
	return append(buf, '\n')
}

// appendLine writes one series.
func (d *Def) appendLine(buf []byte, s sample) []byte {
	order := d.labelOrder()
	buf = append(buf, d.Name...)
	for j, li := range order {
		if j == 0 {
			buf = append(buf, '{')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, d.Labels[li]...)
		buf = append(buf, '=', '"')
		buf = appendEscaped(buf, s.lvs[li], true)
		buf = append(buf, '"')
	}
	if len(order) > 0 {
		buf = append(buf, '}')
	}
	buf = append(buf, ' ')
	buf = appendFloat(buf, s.v)
	return append(buf, '\n')
}

// lineLength estimates the length of a series' line.
func lineLength(d *Def, s sample) int {
	n := len(d.Name) + 24
	for i, l := range d.Labels {
		n += len(l) + len(s.lvs[i]) + 4
	}
	return n
}

// appendEscaped escapes backslashes and newlines, and double quotes when
// quote is set, as expfmt does.
func appendEscaped(buf []byte, s string, quote bool) []byte {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '\n' || c == '"' {
			clean = false
			break
		}
	}
	if clean {
		return append(buf, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			buf = append(buf, '\\', '\\')
		case c == '\n':
			buf = append(buf, '\\', 'n')
		case c == '"' && quote:
			buf = append(buf, '\\', '"')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// appendFloat formats a value as expfmt's text format does (OpenMetrics:
// appendOpenMetricsLine).
func appendFloat(buf []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(buf, "NaN"...)
	case math.IsInf(f, +1):
		return append(buf, "+Inf"...)
	case math.IsInf(f, -1):
		return append(buf, "-Inf"...)
	case f == 0: // negative zero too
		return append(buf, '0')
	}
	return strconv.AppendFloat(buf, f, 'g', -1, 64)
}
