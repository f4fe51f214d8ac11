package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// config holds the flags that shape the metrics; serve, snapshot and
// explain share them so that all three see the cluster the same way.
type config struct {
	attributeLabels       string
	podLabels             string
	unreservedGrace       time.Duration
	devicePluginResources string
	negativeControl       string
	// shard is set by serve's sharding flags; the other commands are
	// unsharded.
	shard shard.Shard
}

func (c *config) register(app *kingpin.Application) {
	app.Flag("device.attribute-labels", "Device attributes exported as labels of dra_device_info: comma-separated attribute[=label] (bare names are in the driver's domain).").
		Default(collector.FormatAttributeLabels(collector.DefaultAttributeLabels)).StringVar(&c.attributeLabels)
	app.Flag("pod.labels-allowlist", "Comma-separated pod label keys exported on dra_pod_labels (none by default: pod labels can be unbounded or sensitive).").
		PlaceHolder("KEYS").StringVar(&c.podLabels)
	app.Flag("claim.unreserved-grace-period", "How long an allocated claim may reserve no pod before it counts as leaked (reason allocated_unreserved).").
		Default("5m").DurationVar(&c.unreservedGrace)
	registerDevicePluginResources(app, &c.devicePluginResources)
	app.Flag("gates.negative-control-label", "Pod label KEY=VALUE that marks negative controls (dra_negative_control; they get no gates); empty marks none.").
		Default(defaultNegativeControl).StringVar(&c.negativeControl)
}

// defaultConfig is the config of a command given none of these flags.
func defaultConfig() (config, error) {
	var c config
	app := kingpin.New("defaults", "")
	c.register(app)
	_, err := app.Parse(nil)
	return c, err
}

// registerDevicePluginResources is the flag serve and node share, so that
// both processes take the same resources for device-plugin GPUs.
func registerDevicePluginResources(app *kingpin.Application, v *string) {
	app.Flag("device-plugin.resources", "Comma-separated extended resources that device plugins advertise for GPUs (the device-plugin lane).").
		Default("nvidia.com/gpu").StringVar(v)
}

// defaultNegativeControl is the label the chart's values name too.
const defaultNegativeControl = "dra-exporter.io/negative-control=true"

// controlLabel parses --gates.negative-control-label.
func (c *config) controlLabel() (collector.ControlLabel, error) {
	if strings.TrimSpace(c.negativeControl) == "" {
		return collector.ControlLabel{}, nil
	}
	key, value, ok := strings.Cut(c.negativeControl, "=")
	if !ok {
		return collector.ControlLabel{}, fmt.Errorf("--gates.negative-control-label: want KEY=VALUE, got %q", c.negativeControl)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return collector.ControlLabel{}, fmt.Errorf("--gates.negative-control-label: key %q: %s", key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return collector.ControlLabel{}, fmt.Errorf("--gates.negative-control-label: value %q: %s", value, strings.Join(errs, "; "))
	}
	return collector.ControlLabel{Key: key, Value: value}, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func (c *config) trimmer() objects.Trimmer {
	t := objects.Trimmer{PodLabels: splitList(c.podLabels)}
	// The negative-control label is kept too (not exported: collectors
	// read only the allowlist for dra_pod_labels).
	if control, err := c.controlLabel(); err == nil && control.Key != "" {
		t.PodLabels = append(t.PodLabels, control.Key)
	}
	if c.shard.Sharded() {
		t.EventNamespaces = c.shard.Owns
		if !c.shard.OwnsCluster() {
			// Shard 0 keeps every pod whole: its lane capacity and
			// latency histograms read every namespace's pods.
			t.ContextPods = func(ns string) bool { return !c.shard.Owns(ns) }
		}
	}
	return t
}

func (c *config) indexConfig(now func() time.Time, obs index.Observer) index.Config {
	return index.Config{Now: now, Observer: obs, DevicePluginResources: dra.ParseResources(c.devicePluginResources), Shard: c.shard}
}

// collectors builds the cluster collectors from the flags.
func (c *config) collectors() ([]engine.Collector, error) {
	attrs, err := collector.ParseAttributeLabels(c.attributeLabels)
	if err != nil {
		return nil, fmt.Errorf("--device.attribute-labels: %w", err)
	}
	if c.unreservedGrace < 0 {
		return nil, fmt.Errorf("--claim.unreserved-grace-period must not be negative")
	}
	control, err := c.controlLabel()
	if err != nil {
		return nil, err
	}
	return collector.ClusterCollectors(collector.Config{
		AttributeLabels: attrs,
		PodLabels:       splitList(c.podLabels),
		UnreservedGrace: c.unreservedGrace,
		NegativeControl: control,
	}), nil
}
