package test

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KEDA's keda.sh/v1alpha1 ScaledObject and TriggerAuthentication, as far as the
// chart writes them: the JSON field names of KEDA's Go types
// (apis/keda/v1alpha1/scaledobject_types.go and triggerauthentication_types.go of
// github.com/kedacore/keda v2), which the Go module proxy here does not serve. A
// field the chart writes that KEDA does not have fails the strict decoding.

type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef *struct {
		Name                   string `json:"name"`
		APIVersion             string `json:"apiVersion,omitempty"`
		Kind                   string `json:"kind,omitempty"`
		EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
	} `json:"scaleTargetRef"`
	PollingInterval       *int32 `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
	Advanced              *struct {
		HorizontalPodAutoscalerConfig *struct {
			Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			Name     string                                         `json:"name,omitempty"`
		} `json:"horizontalPodAutoscalerConfig,omitempty"`
		RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
	} `json:"advanced,omitempty"`
	Triggers []scaleTrigger `json:"triggers"`
	Fallback *struct {
		FailureThreshold int32  `json:"failureThreshold"`
		Replicas         int32  `json:"replicas"`
		Behavior         string `json:"behavior,omitempty"`
	} `json:"fallback,omitempty"`
}

type scaleTrigger struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
	MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
	} `json:"spec"`
}
