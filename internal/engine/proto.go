package engine

// The scrape's fast path in the protobuf format (io.prometheus.client.
// MetricFamily, length-delimited), which Prometheus asks for first when
// native histograms are on. It is written from the same kept text as the
// text formats (TextFamilies): each series line is read back (its label
// values unescaped, its value parsed) and encoded as client_golang's
// Gather and expfmt's delimited encoder would encode the const gauge it
// came from, byte for byte (TestProtoMatchesGather). A protobuf scrape
// therefore runs no collector that a text scrape would not, and a kept
// chunk of lines keeps its encoding too (chunkProto): an unchanged
// cluster's protobuf scrape writes bytes, as a text scrape does.

import (
	"encoding/binary"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/dra-exporter/dra-exporter/internal/family"
)

// Field numbers of io.prometheus.client (client_model's metrics.proto).
const (
	familyName   protowire.Number = 1
	familyHelp   protowire.Number = 2
	familyType   protowire.Number = 3
	familyMetric protowire.Number = 4
	metricLabel  protowire.Number = 1
	metricGauge  protowire.Number = 2
	pairName     protowire.Number = 1
	pairValue    protowire.Number = 2
	gaugeValue   protowire.Number = 1
	// metricTypeGauge is MetricType GAUGE.
	metricTypeGauge = 1
)

// WriteProtoTo writes the family as one length-delimited protobuf
// MetricFamily. Every family the exporter renders is a gauge family (the
// collectors emit gauges only). A message starts with its length: the
// family's own fields and the series of its text (a family rendered whole)
// are encoded into a buffer, and a family of rows adds its chunks' series
// as each chunk keeps them encoded (chunkProto), so a scrape encodes only
// the chunks a change made since the last protobuf scrape, and concurrent
// scrapes write the same encoded chunks instead of a copy of the family
// each.
func (f Family) WriteProtoTo(w io.Writer) (int64, error) {
	d := f.def
	bp := protoBuffers.Get().(*[]byte)
	defer protoBuffers.Put(bp)
	head := (*bp)[:0]
	head = protowire.AppendTag(head, familyName, protowire.BytesType)
	head = protowire.AppendString(head, d.Name)
	head = protowire.AppendTag(head, familyHelp, protowire.BytesType)
	head = protowire.AppendString(head, d.Help)
	head = protowire.AppendTag(head, familyType, protowire.VarintType)
	head = protowire.AppendVarint(head, metricTypeGauge)
	eachTextSeries(f.text, func(line []byte) { head = appendMetric(head, d, line) })
	*bp = head
	size := len(head)
	for c := range f.lines.chunks {
		size += len(f.lines.proto(c, d))
	}
	var lenBytes [binary.MaxVarintLen64]byte
	n, err := w.Write(protowire.AppendVarint(lenBytes[:0], uint64(size)))
	total := int64(n)
	if err != nil {
		return total, err
	}
	n, err = w.Write(head)
	total += int64(n)
	for c := range f.lines.chunks {
		if err != nil {
			break
		}
		n, err = w.Write(f.lines.proto(c, d))
		total += int64(n)
	}
	return total, err
}

// protoBuffers hold the families' own fields while they are encoded.
var protoBuffers = sync.Pool{New: func() any { return new([]byte) }}

// chunkProto is one chunk's series as the Metric fields of their family's
// message, encoded once.
type chunkProto struct {
	once sync.Once
	b    []byte
	// ok is set once b holds the encoding: an encoding that panicked
	// (no line the collectors write makes it) leaves it unset, and the
	// chunk is then encoded on each write instead of left out.
	ok bool
}

// proto returns chunk c's series encoded, encoding them on the first call.
func (s lineSeq) proto(c int, d *family.Def) []byte {
	if c >= len(s.protos) || s.protos[c] == nil { // not made by newSeq or update
		return encodeChunk(nil, s.chunks[c], d)
	}
	p := s.protos[c]
	p.once.Do(func() {
		bp := protoBuffers.Get().(*[]byte)
		defer protoBuffers.Put(bp)
		*bp = encodeChunk((*bp)[:0], s.chunks[c], d)
		p.b, p.ok = slices.Clone(*bp), true
	})
	if !p.ok {
		return encodeChunk(nil, s.chunks[c], d)
	}
	return p.b
}

func encodeChunk(buf []byte, chunk []line, d *family.Def) []byte {
	for _, l := range chunk {
		buf = appendMetric(buf, d, l.text)
	}
	return buf
}

// eachTextSeries calls fn with each series line of text (without the HELP
// and TYPE lines), in order.
func eachTextSeries(text []byte, fn func(line []byte)) {
	for len(text) > 0 {
		n := indexNewline(text) + 1
		if text[0] != '#' {
			fn(text[:n])
		}
		text = text[n:]
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return len(b) - 1
}

// seriesLine walks one series line as appendLine wrote it: the family's
// labels in name order, each value escaped, then the value.
type seriesLine struct {
	line []byte
	pos  int
}

// nextValue returns the escaped bytes of the value of the next label, whose
// name is nameLen bytes long, how many bytes it has unescaped, and whether
// it has escapes.
func (s *seriesLine) nextValue(nameLen int) (escaped []byte, n int, esc bool) {
	// Past the { or comma, the name and =".
	s.pos += 1 + nameLen + 2
	start := s.pos
	i := start
	for {
		switch s.line[i] {
		case '"':
			s.pos = i + 1
			return s.line[start:i], n, esc
		case '\\':
			// The byte after it stands for one byte, a quote among them.
			esc = true
			i++
		}
		i++
		n++
	}
}

// value returns the series' value: the bytes after the last space.
func (s *seriesLine) value() []byte {
	end := len(s.line) - 1 // the newline
	i := end - 1
	for s.line[i] != ' ' {
		i--
	}
	return s.line[i+1 : end]
}

func labelPairSize(nameLen, valueLen int) int {
	return protowire.SizeTag(pairName) + protowire.SizeBytes(nameLen) +
		protowire.SizeTag(pairValue) + protowire.SizeBytes(valueLen)
}

// appendMetric appends the family's metric field for one series line. The
// Metric's length goes before it, and is known once it is encoded: a slot
// of the most bytes it can take (a series line is far shorter than 2 MiB)
// is left for it, and the Metric moved when its length takes fewer (or
// more).
func appendMetric(buf []byte, d *family.Def, line []byte) []byte {
	const slot = 3 // varint bytes of a length under 2 MiB
	buf = protowire.AppendTag(buf, familyMetric, protowire.BytesType)
	at := len(buf)
	buf = append(buf, 0, 0, 0)
	s := seriesLine{line: line, pos: len(d.Name)}
	for _, li := range d.LabelOrder() {
		name := d.Labels[li]
		escaped, vn, esc := s.nextValue(len(name))
		buf = protowire.AppendTag(buf, metricLabel, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(labelPairSize(len(name), vn)))
		buf = protowire.AppendTag(buf, pairName, protowire.BytesType)
		buf = protowire.AppendString(buf, name)
		buf = protowire.AppendTag(buf, pairValue, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(vn))
		if esc {
			buf = appendUnescaped(buf, escaped)
		} else {
			buf = append(buf, escaped...)
		}
	}
	buf = protowire.AppendTag(buf, metricGauge, protowire.BytesType)
	buf = protowire.AppendVarint(buf, 1+8)
	buf = protowire.AppendTag(buf, gaugeValue, protowire.Fixed64Type)
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(parseValue(s.value())))
	size := len(buf) - at - slot
	var lenBytes [binary.MaxVarintLen64]byte
	n := len(protowire.AppendVarint(lenBytes[:0], uint64(size)))
	switch {
	case n < slot:
		copy(buf[at+n:], buf[at+slot:])
		buf = buf[:len(buf)-(slot-n)]
	case n > slot: // not from any series the collectors write
		buf = slices.Insert(buf, at+slot, make([]byte, n-slot)...)
	}
	copy(buf[at:], lenBytes[:n])
	return buf
}

// appendUnescaped undoes appendEscaped.
func appendUnescaped(buf, escaped []byte) []byte {
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '\\' {
			i++
			if c = escaped[i]; c == 'n' {
				c = '\n'
			}
		}
		buf = append(buf, c)
	}
	return buf
}

// parseValue reads back a value appendFloat wrote. Small integers, most of
// the exposition, are read without strconv (whose argument would be a
// string made for each series); 'g' formatting is exact, so ParseFloat
// gives back the very float.
func parseValue(v []byte) float64 {
	neg := len(v) > 1 && v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	if len(digits) > 0 && len(digits) <= 15 {
		var n int64
		integral := true
		for _, c := range digits {
			if c < '0' || c > '9' {
				integral = false
				break
			}
			n = n*10 + int64(c-'0')
		}
		if integral {
			if neg {
				return -float64(n)
			}
			return float64(n)
		}
	}
	switch string(v) {
	case "NaN":
		return math.NaN()
	case "+Inf":
		return math.Inf(+1)
	case "-Inf":
		return math.Inf(-1)
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return math.NaN() // not written by appendFloat
	}
	return f
}
