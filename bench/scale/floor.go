package main

// The floor: a bare client-go sync of what the exporter watches, in this
// process, with no transform and no handlers. No exporter can be ready
// sooner, or cost the API server less, than its informers' initial lists.

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Floor is what the bare sync measured.
type Floor struct {
	SyncSeconds             float64        `json:"sync_seconds"`
	SettleSeconds           float64        `json:"settle_seconds"`
	APIServerSyncCPUSeconds float64        `json:"apiserver_sync_cpu_seconds"`
	Objects                 map[string]int `json:"objects"`
}

// measureFloor lists and watches, over protobuf, the resources the
// exporter watches (with its field selector on events) until every informer
// has synced.
func measureFloor(ctx context.Context, admin *rest.Config, apiserverPID int) (*Floor, error) {
	cfg := rest.CopyConfig(admin)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "dra-bench-floor"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	apiStart, err := cpuSeconds(apiserverPID)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	factory := informers.NewSharedInformerFactory(client, 0)
	events := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.AndSelectors(
			fields.OneTermEqualSelector("type", "Warning"),
			fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		).String()
	}))
	stores := map[string]cache.SharedIndexInformer{
		"deviceclasses":    factory.Resource().V1().DeviceClasses().Informer(),
		"resourceslices":   factory.Resource().V1().ResourceSlices().Informer(),
		"resourceclaims":   factory.Resource().V1().ResourceClaims().Informer(),
		"devicetaintrules": factory.Resource().V1().DeviceTaintRules().Informer(),
		"pods":             factory.Core().V1().Pods().Informer(),
		"nodes":            factory.Core().V1().Nodes().Informer(),
		"events":           events.Core().V1().Events().Informer(),
	}
	factory.Start(ctx.Done())
	events.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
		events.Shutdown()
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, 20*time.Minute)
	defer syncCancel()
	for name, inf := range stores {
		if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
			return nil, fmt.Errorf("floor: %s did not sync", name)
		}
	}
	f := &Floor{SyncSeconds: time.Since(start).Seconds(), Objects: map[string]int{}}
	apiEnd, _ := cpuSeconds(apiserverPID)
	f.APIServerSyncCPUSeconds = apiEnd - apiStart
	for name, inf := range stores {
		f.Objects[name] = len(inf.GetStore().ListKeys())
	}
	return f, nil
}
