{{/* The release's object name. */}}
{{- define "power.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "power.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Memory request and limit in bytes: the memory plan plus headroom. */}}
{{- define "power.memoryBytes" -}}
{{- $p := .Values.memoryPlan -}}
{{- $sum := add $p.weightsBytes $p.kvCacheBytes $p.stateBytes $p.scratchBytes -}}
{{- div (mul $sum (add 100 $p.headroomPercent)) 100 -}}
{{- end -}}
