package collector

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// AttributeLabel maps a device attribute to a label of dra_device_info.
type AttributeLabel struct {
	Attribute string // bare name (driver domain) or fully qualified
	Label     string
}

// DefaultAttributeLabels are the attributes NVIDIA's DRA driver publishes
// that SREs filter GPUs by. Each is one static value per device.
var DefaultAttributeLabels = []AttributeLabel{
	{Attribute: "productName", Label: "product"},
	{Attribute: "type", Label: "type"},
	{Attribute: "profile", Label: "profile"},
	{Attribute: "parentUUID", Label: "parent_gpu_uuid"},
}

// FormatAttributeLabels writes labels in the form ParseAttributeLabels
// reads: the flag's default is the defaults written so.
func FormatAttributeLabels(labels []AttributeLabel) string {
	parts := make([]string, len(labels))
	for i, a := range labels {
		parts[i] = a.Attribute + "=" + a.Label
	}
	return strings.Join(parts, ",")
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ParseAttributeLabels parses "attr=label,attr" (a bare entry uses the
// attribute's name, snake-cased, as the label).
func ParseAttributeLabels(spec string) ([]AttributeLabel, error) {
	var out []AttributeLabel
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		attr, label, ok := strings.Cut(part, "=")
		if !ok {
			label = snakeCase(attr[strings.LastIndex(attr, "/")+1:])
		}
		if !labelName.MatchString(label) || strings.HasPrefix(label, "__") {
			return nil, fmt.Errorf("device attribute %q: %q is not a valid label name", attr, label)
		}
		if reservedDeviceLabels[label] || seen[label] {
			return nil, fmt.Errorf("device attribute %q: label %q is already used", attr, label)
		}
		seen[label] = true
		out = append(out, AttributeLabel{Attribute: attr, Label: label})
	}
	return out, nil
}

var reservedDeviceLabels = map[string]bool{"driver": true, "pool": true, "node": true, "device": true, "gpu_uuid": true}

// snakeCase turns an attribute name into a label name, keeping acronyms
// whole: productName -> product_name, parentUUID -> parent_uuid,
// pciBusID -> pci_bus_id.
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	isUpper := func(r rune) bool { return r >= 'A' && r <= 'Z' }
	isLowerOrDigit := func(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') }
	for i, r := range rs {
		switch {
		case isUpper(r):
			nextLower := i+1 < len(rs) && rs[i+1] >= 'a' && rs[i+1] <= 'z'
			if i > 0 && (isLowerOrDigit(rs[i-1]) || (isUpper(rs[i-1]) && nextLower)) {
				b.WriteByte('_')
			}
			b.WriteRune(r - 'A' + 'a')
		case isLowerOrDigit(r) || r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

type deviceCollector struct {
	attrs     []AttributeLabel
	info      *family.Def
	memory    *family.Def
	remaining *family.Def
}

// NewDeviceCollector exports every published device with its attributes.
func NewDeviceCollector(attrs []AttributeLabel) engine.Collector {
	labels := []string{"driver", "pool", "node", "device", "gpu_uuid"}
	for _, a := range attrs {
		labels = append(labels, a.Label)
	}
	return &deviceCollector{
		attrs: attrs,
		info: family.New("dra_device_info", family.TypeGauge,
			"A device published in a ResourceSlice, with allowlisted attributes as labels.", labels...).
			WithDoc("Only the newest generation of each pool is read. Always 1."),
		memory: family.New("dra_device_memory_bytes", family.TypeGauge,
			"The memory capacity a ResourceSlice publishes for the device, in bytes.", "driver", "pool", "node", "device"),
		remaining: family.New("dra_device_capacity_remaining", family.TypeGauge,
			"What is left of a shared device's capacity after the claims that share it.", "driver", "pool", "node", "device", "capacity").
			WithDoc("Only devices with allowMultipleAllocations (KEP-5075): the published capacity less the consumedCapacity of every allocation of the device. capacity is the capacity's name as published (memory in bytes). A request asking more than is left on every matching device waits with reason capacity_exhausted."),
	}
}

func (c *deviceCollector) Name() string        { return "device" }
func (c *deviceCollector) Defs() []*family.Def { return []*family.Def{c.info, c.memory, c.remaining} }

func (c *deviceCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per device, which reads, for a shared device, the claims
// that consume its capacity (FanOut).
func (c *deviceCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, d := range s.Devices {
		c.row(s, d, rows)
	}
}

// RowsOf (engine.Partial) is EachRow over some devices: those whose
// sharing claims changed (the fan-out entry's Back).
func (c *deviceCollector) RowsOf(s *index.Snapshot, _ time.Time, objs []any, rows *engine.Rows) {
	for _, o := range objs {
		c.row(s, o.(*index.Device), rows)
	}
}

func (c *deviceCollector) row(s *index.Snapshot, d *index.Device, rows *engine.Rows) {
	e := rows.Row(d)
	if e == nil {
		return
	}
	// A slice of its own per series: the emitter keeps it.
	lvs := make([]string, 0, 5+len(c.attrs))
	lvs = append(lvs, d.Key.Driver, d.Key.Pool, d.Node, d.Key.Device, d.GPUUUID)
	for _, a := range c.attrs {
		v, _ := d.Attribute(a.Attribute)
		lvs = append(lvs, v)
	}
	e.Gauge(c.info, 1, lvs...)
	if q, ok := capacity(d, "memory"); ok {
		e.Gauge(c.memory, q, d.Key.Driver, d.Key.Pool, d.Node, d.Key.Device)
	}
	for name, q := range allocator.Of(s).RemainingCapacity(d) {
		e.Gauge(c.remaining, q.AsApproximateFloat64(), d.Key.Driver, d.Key.Pool, d.Node, d.Key.Device, string(name))
	}
}

func capacity(d *index.Device, name string) (float64, bool) {
	c, ok := d.Capacity[resourceapi.QualifiedName(name)]
	if !ok {
		c, ok = d.Capacity[resourceapi.QualifiedName(d.Key.Driver+"/"+name)]
	}
	if !ok {
		return 0, false
	}
	return c.Value.AsApproximateFloat64(), true
}
