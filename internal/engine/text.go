package engine

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
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Family is one family's exposition: its HELP and TYPE lines and series,
// in Text and then, for a family of rows, one line each.
type Family struct {
	Name string
	def  *family.Def
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
		samples []family.Sample
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
		if rowc, ok := x.collectors[i].(RowCollector); ok && c.cacheable(x, i) {
			// Only the rows of changed objects are rendered.
			rc := c.rowCache(i)
			var lines map[*family.Def]lineSeq
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
	}, func(i int, samples []family.Sample) {
		runs = append(runs, run{i, samples})
	})
	count := map[*family.Def]int{}
	fresh := map[*family.Def]bool{} // families with a series from a run that is not kept
	for _, r := range runs {
		kept := r.i >= 0 && c.cacheable(x, r.i) && c.keep(x, r.i, r.samples, snaps[r.i], times[r.i])
		for _, s := range r.samples {
			count[s.Def]++
			if !kept {
				fresh[s.Def] = true
			}
		}
	}
	byDef := make(map[*family.Def][]family.Sample, len(count))
	for d, n := range count {
		byDef[d] = make([]family.Sample, 0, n)
	}
	for _, r := range runs {
		for _, s := range r.samples {
			byDef[s.Def] = append(byDef[s.Def], s)
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
		text := d.AppendText(nil, samples)
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
func (x *Exporter) each(plan func(i int, s *index.Snapshot, now time.Time) step, emit func(i int, samples []family.Sample)) {
	if x.complete != nil && !x.complete() {
		return
	}
	s := x.src.Snapshot()
	now := x.now()
	vs, vnow := x.verdictView(s, now)
	type outcome struct {
		runs    bool
		step    step
		samples []family.Sample
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
		if _, ok := c.(Verdict); ok {
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
			var e *family.Emitter
			if e, o.err = x.run(c, s, now); o.err == nil {
				o.samples = e.Samples()
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
			emit(-1, []family.Sample{
				{Def: scrapeDuration, Value: o.took.Seconds(), LabelValues: []string{c.Name()}},
				{Def: scrapeSuccess, Value: family.BoolFloat(o.err == nil), LabelValues: []string{c.Name()}},
			})
		}
	}
}
