package gpu

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// dcgmSession is one connection to DCGM (an embedded host engine, or a
// standalone nv-hostengine) with its groups and watches, plus NVML for
// what DCGM does not give: MIG instances' UUIDs and the process list
// (go-dcgm has no call that lists running processes).
//
// The basic fields and the profiling fields are watched in separate
// requests, on separate entity groups for GPUs and GPU instances: when a
// watch request fails the host engine undoes every watch of that request
// (DcgmHostEngineHandler.cpp ~4668 and ~4691), so a profiling field that
// cannot be watched (no CAP_SYS_ADMIN before Hopper, another client
// holding the profiling lock) must not share a request with the basic
// fields. Which profiling fields to ask for comes from
// GetSupportedMetricGroups, as dcgm-exporter does (pkg/cmd/app.go
// ~957-997, counter_config.go ~146-161).
type dcgmSession struct {
	lib     DCGMLib
	nv      *nvmlView // nil: NVML unavailable
	cleanup func()
	opts    Options

	gpus      []dcgmGPU
	instances []dcgmInstance
	// computes maps each compute-instance entity to its GPU-instance
	// entity: DCGM records an XID that carries compute-instance and
	// GPU-instance IDs on the compute instance, one that carries a
	// GPU-instance ID only on the GPU instance, and only one that
	// carries neither on the GPU (DcgmCacheManager.cpp:7874-7893,
	// RecordXidForComputeInstance :7556-7591, RecordXidForGpuInstance
	// :7594-7625); XID's entity level is the compute instance
	// (dcgm_fields.cpp:2323-2331), so it is the instance's own.
	computes map[uint]uint
	// hierarchy identifies the GPU-instance hierarchy the watches were
	// set up for: DCGM renumbers GPU-instance entities on every MIG
	// reconfiguration (DcgmCacheManager.cpp ~943), so a change means new
	// groups and watches, and entities are keyed by UUID, never by
	// entity number.
	hierarchy string

	groups      []GroupHandle
	fieldGroups []FieldHandle
	gpuGroup    GroupHandle
	instGroup   GroupHandle
	hasInst     bool

	// profFields are the profiling fields every GPU supports.
	profFields  []FieldID
	profStatus  GroupStatus
	profRetryAt time.Time
	profFG      FieldHandle
	hasProfFG   bool

	gpuFields, instFields []FieldID
}

type dcgmGPU struct {
	id          uint
	uuid, model string
}

type dcgmInstance struct {
	entity, gpuID  uint
	parentUUID     string
	nvmlInstanceID uint
	// dcgmName is DCGM's name of the instance's profile
	// (DCGM_FI_DEV_NAME), used when NVML cannot name it.
	dcgmName string
}

// errConnectionLost marks a read whose DCGM connection is gone: the
// supervisor closes the session and connects again.
var errConnectionLost = errors.New("DCGM connection lost")

// dcgmErr wraps a DCGM error with what was being done, and marks the
// connection errors.
func dcgmErr(what string, err error) error {
	if dcgmStatus(err) == StConnectionNotValid {
		return fmt.Errorf("%s: %w: %w", what, errConnectionLost, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func openDCGMSession(lib DCGMLib, nvml NVMLLib, opts Options) (session, error) {
	if lib == nil {
		return nil, fmt.Errorf("dcgm: %w", ErrUnavailable)
	}
	cleanup, err := lib.Init(opts.HostEngine)
	if err != nil {
		if opts.HostEngine == "" && dcgmStatus(err) == StInitError && nvmlHasMIG(nvml, opts) {
			return nil, fmt.Errorf("dcgm init: %w: %w", errEmbeddedMIG, err)
		}
		return nil, fmt.Errorf("dcgm init: %w", err)
	}
	s := &dcgmSession{lib: lib, cleanup: cleanup, opts: opts}
	if s.nv, err = openNVML(nvml, opts); err != nil {
		opts.logger().Warn("DCGM serves without NVML", "err", err, "effect", errNoNVML.Error())
		s.nv = nil
	}
	if err := s.discover(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// nvmlHasMIG reports whether NVML sees a GPU with MIG mode on (any caller
// may read the mode).
func nvmlHasMIG(lib NVMLLib, opts Options) bool {
	v, err := openNVML(lib, opts)
	if err != nil {
		return false
	}
	defer v.close()
	for _, g := range v.gpus {
		if current, _, ret := g.dev.GetMigMode(); ret == NVMLSuccess && current == nvmlDeviceMigEnable {
			return true
		}
	}
	return false
}

func (s *dcgmSession) name() string { return SourceDCGM }

func (s *dcgmSession) close() {
	s.unwatch()
	if s.nv != nil {
		s.nv.close()
	}
	if s.cleanup != nil {
		s.cleanup()
		s.cleanup = nil
	}
}

// discover reads the GPUs, which profiling fields they support, and the
// GPU-instance hierarchy, and sets up the watches.
func (s *dcgmSession) discover() error {
	ids, err := s.lib.GetSupportedDevices()
	if err != nil {
		return dcgmErr("dcgm devices", err)
	}
	s.gpus = s.gpus[:0]
	for _, id := range ids {
		info, err := s.lib.GetDeviceInfo(id)
		if err != nil {
			return dcgmErr(fmt.Sprintf("dcgm device %d", id), err)
		}
		s.gpus = append(s.gpus, dcgmGPU{id: id, uuid: info.UUID, model: info.Model})
	}
	s.profFields, s.profStatus = s.supportedProfiling()
	h, err := s.lib.GetGPUInstanceHierarchy()
	if err != nil {
		return dcgmErr("dcgm GPU instance hierarchy", err)
	}
	return s.rewatch(h)
}

// nameInstances reads DCGM's name of each instance's profile (live), the
// fallback where NVML cannot name it.
func (s *dcgmSession) nameInstances() {
	pairs := make([]EntityPair, len(s.instances))
	for i, in := range s.instances {
		pairs[i] = EntityPair{Group: EntityGPUInstance, ID: in.entity}
	}
	values, err := s.lib.EntitiesGetLatestValues(pairs, []FieldID{FieldName}, FieldFlagLiveData)
	if err != nil {
		return
	}
	for _, v := range values {
		if v.Status != StOK || v.Type != FieldTypeString || strings.HasPrefix(v.String, "<<<") {
			continue
		}
		for i := range s.instances {
			if s.instances[i].entity == v.Entity.ID {
				s.instances[i].dcgmName = v.String
			}
		}
	}
}
