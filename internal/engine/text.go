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

// Prerender renders the families once into the row store and drops the
// rest: called when the informers have synced, so that the first scrape
// writes what is ready instead of rendering everything (seconds at 100k claims, past
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
// which ends the whole response). A row collector's families are written
// from the row store (store.go), which renders only the rows of changed
// objects; the other collectors render whole. Concurrent calls take turns.
func (x *Exporter) TextFamilies(openMetrics bool) []Family {
	st := &x.store
	st.mu.Lock()
	defer st.mu.Unlock()
	st.init(x)
	byDef := map[*family.Def][]family.Sample{}
	var stored []int // the row collectors whose pass succeeded
	x.each(func(i int, s *index.Snapshot, now time.Time) ([]family.Sample, error) {
		if set := st.sets[i]; set != nil {
			return nil, set.render(x, x.collectors[i].(RowCollector), s, now)
		}
		e, err := x.run(x.collectors[i], s, now)
		if err != nil {
			return nil, err
		}
		return e.Samples(), nil
	}, func(i int, samples []family.Sample) {
		if i >= 0 && st.sets[i] != nil {
			stored = append(stored, i)
		}
		for _, sm := range samples {
			byDef[sm.Def] = append(byDef[sm.Def], sm)
		}
	})
	out := make([]Family, 0, len(byDef))
	for _, i := range stored {
		set := st.sets[i]
		for _, d := range x.collectors[i].Defs() {
			if lines, ok := set.lines[d]; ok {
				out = append(out, Family{Name: d.Name, def: d, text: st.header(d), lines: lines, om: openMetrics})
			}
		}
	}
	for d, samples := range byDef {
		out = append(out, Family{Name: d.Name, def: d, text: d.AppendText(nil, samples), om: openMetrics})
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// store is the exporter's row store: a row set per row collector that
// owns its families (a family two collectors list is rendered whole).
type store struct {
	mu      sync.Mutex
	sets    map[int]*rowSet
	headers map[*family.Def][]byte
}

// init makes the store ready for its first use.
func (st *store) init(x *Exporter) {
	if st.sets != nil {
		return
	}
	owners := map[*family.Def]int{}
	for _, c := range x.collectors {
		for _, d := range c.Defs() {
			owners[d]++
		}
	}
	st.sets, st.headers = map[int]*rowSet{}, map[*family.Def][]byte{}
	for i, c := range x.collectors {
		if _, ok := c.(RowCollector); !ok {
			continue
		}
		if !slices.ContainsFunc(c.Defs(), func(d *family.Def) bool { return owners[d] > 1 }) {
			st.sets[i] = &rowSet{}
		}
	}
}

// header returns a family's HELP and TYPE lines, written once.
func (st *store) header(d *family.Def) []byte {
	h, ok := st.headers[d]
	if !ok {
		h = slices.Clip(d.AppendHeader(nil))
		st.headers[d] = h
	}
	return h
}

// each runs job for every collector over one snapshot and hands the
// samples of each that succeeded, and the timing series (collector -1), to
// emit, in collector order; a failure is logged and its collector left
// out. The jobs run side by side, as many at once as there are processors:
// a snapshot is read-only and its memos lock, and at 100k claims a scrape
// that renders everything is seconds of CPU. A job must keep to its own
// collector's state.
func (x *Exporter) each(job func(i int, s *index.Snapshot, now time.Time) ([]family.Sample, error), emit func(i int, samples []family.Sample)) {
	if x.complete != nil && !x.complete() {
		return
	}
	s := x.src.Snapshot()
	now := x.now()
	vs, vnow := x.verdictView(s, now)
	type outcome struct {
		runs    bool
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			start := time.Now()
			defer func() {
				// The job's own panics (a collector's are recovered in run).
				if r := recover(); r != nil {
					o.samples, o.err = nil, panicError{value: r, stack: debug.Stack()}
				}
				o.took = time.Since(start)
			}()
			o.samples, o.err = job(i, s, now)
		}()
	}
	wg.Wait()
	for i, c := range x.collectors {
		o := &out[i]
		if !o.runs {
			continue
		}
		if o.err != nil {
			x.logFailure(c, o.err)
		} else {
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
