// Package test lints and renders the Helm chart deploy/helm/cairn with Helm's own
// packages (the `helm lint --strict` and `helm template` of Helm v4, pinned in
// go.mod), for the default values and each example values file, and decodes every
// object rendered strictly into its Kubernetes type: a field Kubernetes does not
// know fails the test, as the API server would refuse it.
package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../cairn"

// kubeVersion is the cluster version the chart is rendered for: the oldest its
// Chart.yaml accepts.
const kubeVersion = "v1.30.0"

// types maps each apiVersion/kind the chart may render to a new value of its Go type.
var types = map[string]func() any{
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &scaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &triggerAuthentication{} },
}

// valuesFiles are the values the chart is tested with: "" is its defaults.
func valuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return append([]string{""}, files...)
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file == "" {
		return vals
	}
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &vals))
	return vals
}

// render is `helm template cairn deploy/helm/cairn -n cairn -f file`: every
// manifest, hooks included.
func render(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	require.NoError(t, err)
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "cairn"
	install.Namespace = "cairn"
	install.Replace = true
	kv, err := common.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	install.KubeVersion = kv
	r, err := install.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	rel, ok := r.(*release.Release)
	require.True(t, ok, "release type %T", r)
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "\n---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String(), nil
}

// object is a rendered object decoded strictly into its type.
type object struct {
	kind, name string
	value      any
}

// decodeStrict decodes every document of manifests into its Go type, refusing
// unknown and duplicate fields.
func decodeStrict(t *testing.T, manifests string) []object {
	t.Helper()
	var out []object
	for doc := range strings.SplitSeq(manifests, "\n---") {
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		require.NoError(t, err, doc)
		if string(js) == "null" {
			continue // a document of comments only
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(js, &head))
		newValue, ok := types[head.APIVersion+"/"+head.Kind]
		require.True(t, ok, "the chart renders %s/%s, which the test does not know:\n%s", head.APIVersion, head.Kind, doc)
		v := newValue()
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(v), "%s %s:\n%s", head.Kind, head.Metadata.Name, doc)
		out = append(out, object{kind: head.Kind, name: head.Metadata.Name, value: v})
	}
	return out
}

// TestChartLintAndTemplate: for the default values and each example, `helm lint
// --strict` is clean and every rendered object decodes strictly; every pod runs
// as non-root, reads its database URL from a Secret, and no Secret is rendered
// (secrets are referenced, never in values).
func TestChartLintAndTemplate(t *testing.T) {
	t.Parallel()
	for _, file := range valuesFiles(t) {
		name := filepath.Base(file)
		if file == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vals := readValues(t, file)
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "cairn"
			kv, err := common.ParseKubeVersion(kubeVersion)
			require.NoError(t, err)
			lint.KubeVersion = kv
			res := lint.Run([]string{chartDir}, vals)
			var msgs []string
			for _, m := range res.Messages {
				msgs = append(msgs, m.Error())
			}
			require.Empty(t, res.Errors, "helm lint: %s", strings.Join(msgs, "\n"))

			manifests, err := render(t, vals)
			require.NoError(t, err)
			objs := decodeStrict(t, manifests)
			require.NotEmpty(t, objs)
			var jobs int
			for _, o := range objs {
				var spec *corev1.PodSpec
				switch v := o.value.(type) {
				case *appsv1.Deployment:
					spec = &v.Spec.Template.Spec
				case *batchv1.Job:
					spec = &v.Spec.Template.Spec
					jobs++
					require.Equal(t, "pre-install,pre-upgrade", v.Annotations["helm.sh/hook"], "the migrate Job runs before the Deployments change")
				}
				if spec == nil {
					continue
				}
				require.NotNil(t, spec.SecurityContext.RunAsNonRoot, o.name)
				require.True(t, *spec.SecurityContext.RunAsNonRoot, o.name)
				for _, c := range spec.Containers {
					var db *corev1.EnvVar
					for i, e := range c.Env {
						if e.Name == "CAIRN_DATABASE_URL" {
							db = &c.Env[i]
						}
						require.NotContains(t, []string{"CAIRN_TOKENS", "CAIRN_SIGNING_KEY", "CAIRN_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"},
							e.Name+map[bool]string{true: "", false: "(from a Secret)"}[e.Value != ""], "%s sets a secret inline", o.name)
					}
					require.NotNil(t, db, o.name)
					require.Empty(t, db.Value, o.name)
					require.NotNil(t, db.ValueFrom.SecretKeyRef, "%s reads the database URL from a Secret", o.name)
				}
			}
			require.Equal(t, 1, jobs, "one migrate Job")
			if file == "" {
				names := map[string]bool{}
				for _, o := range objs {
					names[o.kind+"/"+o.name] = true
				}
				require.True(t, names["Deployment/cairn-pool-default"], "no pools given: one pool, default")
				require.True(t, names["Deployment/cairn-api"])
				require.True(t, names["Service/cairn"])
			}
		})
	}
}

// TestChartGPUPoolWithKEDA: with an external PostgreSQL and S3 and a gpu pool that
// KEDA scales, the gpu pool is a Deployment of its own with the gpu tag and no
// fixed replicas, its ScaledObject may go to zero and scales on the pool's demand,
// and every server reports the gpu pool's demand.
func TestChartGPUPoolWithKEDA(t *testing.T) {
	t.Parallel()
	manifests, err := render(t, readValues(t, filepath.Join(chartDir, "examples", "external-gpu-keda.yaml")))
	require.NoError(t, err)
	objs := decodeStrict(t, manifests)
	byName := map[string]any{}
	for _, o := range objs {
		byName[o.kind+"/"+o.name] = o.value
	}
	gpu, ok := byName["Deployment/cairn-pool-gpu"].(*appsv1.Deployment)
	require.True(t, ok, "a Deployment for the gpu pool")
	require.Nil(t, gpu.Spec.Replicas, "KEDA owns the gpu pool's replicas")
	env := map[string]string{}
	for _, e := range gpu.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	require.Equal(t, "gpu", env["CAIRN_TAGS"])
	require.Equal(t, "4", env["CAIRN_CONCURRENCY"])
	require.Equal(t, ";gpu", env["CAIRN_DEMAND_POOLS"], "the untagged cpu pool and the gpu pool")
	require.Contains(t, env["CAIRN_BLOBSTORE"], "s3://acme-cairn-blobs")

	so, ok := byName["ScaledObject/cairn-pool-gpu"].(*scaledObject)
	require.True(t, ok, "a ScaledObject for the gpu pool")
	require.Equal(t, "cairn-pool-gpu", so.Spec.ScaleTargetRef.Name)
	require.Equal(t, int32(0), *so.Spec.MinReplicaCount)
	require.Len(t, so.Spec.Triggers, 1)
	require.Equal(t, "prometheus", so.Spec.Triggers[0].Type)
	require.Equal(t, `max(cairn_pool_demand{tags="gpu",namespace="cairn"})`, so.Spec.Triggers[0].Metadata["query"])
	require.Equal(t, "4", so.Spec.Triggers[0].Metadata["threshold"], "one pod per concurrency's worth of demand")
	require.Equal(t, "0", so.Spec.Triggers[0].Metadata["activationThreshold"], "zero only at demand 0")
	require.NotContains(t, byName, "ScaledObject/cairn-pool-cpu", "the cpu pool has fixed replicas")
	require.NotContains(t, byName, "Deployment/cairn-pool-default", "pools given: no default pool")
	cpu, ok := byName["Deployment/cairn-pool-cpu"].(*appsv1.Deployment)
	require.True(t, ok)
	require.Equal(t, int32(4), *cpu.Spec.Replicas)
	require.Contains(t, byName, "ServiceMonitor/cairn")
	require.Contains(t, byName, "NetworkPolicy/cairn")
	require.Contains(t, byName, "PodDisruptionBudget/cairn-pool-gpu")
}

// TestChartRefusesMissingSecrets: a values file without the database Secret, or a
// pool with a name Kubernetes cannot use, fails rendering with the value to set.
func TestChartRefusesMissingSecrets(t *testing.T) {
	t.Parallel()
	_, err := render(t, map[string]any{"database": map[string]any{"urlSecret": map[string]any{"name": ""}}})
	require.ErrorContains(t, err, "database.urlSecret.name")
	_, err = render(t, map[string]any{"pools": map[string]any{"GPU_pool": map[string]any{"tags": []any{"gpu"}}}})
	require.ErrorContains(t, err, "pools.GPU_pool")
}
