package collector

// The scrape's fast path in the protobuf format (io.prometheus.client.
// MetricFamily, length-delimited), which Prometheus asks for first when
// native histograms are on. It is written from the same kept text as the
// text formats (TextFamilies): each series line is read back (its label
// values unescaped, its value parsed) and encoded as client_golang's
// Gather and expfmt's delimited encoder would encode the const gauge it
// came from, byte for byte (TestProtoMatchesGather). A protobuf scrape
// therefore runs no collector that a text scrape would not.

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
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

// gaugeSize is an encoded Metric's gauge field: tag, length, and the
// double value with its tag.
const gaugeSize = 1 + 1 + 1 + 8

// WriteProtoTo writes the family as one length-delimited protobuf
// MetricFamily. Every family the exporter renders is a gauge family (the
// collectors emit gauges only). The family's text is read twice, to size
// the message (a message starts with its length) and to write it, so that
// no copy of the whole family is held: only the size of each series, 4
// bytes a series, between the two passes.
func (f Family) WriteProtoTo(w io.Writer) (int64, error) {
	d := f.def
	size := protowire.SizeTag(familyName) + protowire.SizeBytes(len(d.Name)) +
		protowire.SizeTag(familyHelp) + protowire.SizeBytes(len(d.Help)) +
		protowire.SizeTag(familyType) + protowire.SizeVarint(metricTypeGauge)
	sizes := make([]int32, 0, f.lines.Len()+bytes.Count(f.text, []byte{'\n'}))
	f.eachSeries(func(line []byte) {
		n := metricSize(d, line)
		sizes = append(sizes, int32(n))
		size += protowire.SizeTag(familyMetric) + protowire.SizeBytes(n)
	})

	out := protoWriter{w: w}
	if a, ok := w.(availableBuffer); ok {
		out.avail = a
	}
	buf := out.buffer()
	buf = protowire.AppendVarint(buf, uint64(size))
	buf = protowire.AppendTag(buf, familyName, protowire.BytesType)
	buf = protowire.AppendString(buf, d.Name)
	buf = protowire.AppendTag(buf, familyHelp, protowire.BytesType)
	buf = protowire.AppendString(buf, d.Help)
	buf = protowire.AppendTag(buf, familyType, protowire.VarintType)
	buf = protowire.AppendVarint(buf, metricTypeGauge)
	out.write(buf)
	i := 0
	f.eachSeries(func(line []byte) {
		if out.err == nil {
			out.write(appendMetric(out.buffer(), d, line, int(sizes[i])))
		}
		i++
	})
	return out.n, out.err
}

// availableBuffer is a buffered writer that lends its free space
// (bufio.Writer): a message appended there is written without a copy.
type availableBuffer interface {
	AvailableBuffer() []byte
}

// protoWriter writes encoded pieces, into the writer's own buffer where
// it lends one, else through a buffer of its own.
type protoWriter struct {
	w     io.Writer
	avail availableBuffer
	own   []byte
	n     int64
	err   error
}

func (p *protoWriter) buffer() []byte {
	if p.avail != nil {
		return p.avail.AvailableBuffer()
	}
	return p.own[:0]
}

func (p *protoWriter) write(b []byte) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.err = err
	if p.avail == nil {
		p.own = b
	}
}

// eachSeries calls fn with each series line of the family (without the
// HELP and TYPE lines), in order.
func (f Family) eachSeries(fn func(line []byte)) {
	for text := f.text; len(text) > 0; {
		n := indexNewline(text) + 1
		if text[0] != '#' {
			fn(text[:n])
		}
		text = text[n:]
	}
	for l := range f.lines.all {
		fn(l.text)
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

// metricSize is the encoded size of the Metric of one series line.
func metricSize(d *Def, line []byte) int {
	s := seriesLine{line: line, pos: len(d.Name)}
	n := gaugeSize
	for _, li := range d.labelOrder() {
		_, vn, _ := s.nextValue(len(d.Labels[li]))
		lp := labelPairSize(len(d.Labels[li]), vn)
		n += protowire.SizeTag(metricLabel) + protowire.SizeBytes(lp)
	}
	return n
}

func labelPairSize(nameLen, valueLen int) int {
	return protowire.SizeTag(pairName) + protowire.SizeBytes(nameLen) +
		protowire.SizeTag(pairValue) + protowire.SizeBytes(valueLen)
}

// appendMetric appends the family's metric field for one series line, whose
// Metric has size bytes (metricSize).
func appendMetric(buf []byte, d *Def, line []byte, size int) []byte {
	buf = protowire.AppendTag(buf, familyMetric, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(size))
	s := seriesLine{line: line, pos: len(d.Name)}
	for _, li := range d.labelOrder() {
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
	return binary.LittleEndian.AppendUint64(buf, math.Float64bits(parseValue(s.value())))
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
