// Schema checks of deploy/ (docs/DEPLOY.md), without a cluster:
//  - every object of deploy/k8s/power.yaml and of the Helm chart rendered with several value
//    sets validates against the Kubernetes API schemas (npm kubernetes-models) and the
//    Prometheus Operator's ServiceMonitor schema (@kubernetes-models/prometheus-operator);
//  - the chart's values.yaml passes its values.schema.json (ajv, as Helm checks it) and bad
//    values fail it;
//  - what the objects ask of Power matches the binary: every flag they pass is one `power
//    serve` / `power pull` knows, the probes use /health/ready and /health/live, and the preStop
//    pause plus the drain timeout fit in the termination grace period;
//  - the chart's memory request is the memory plan plus headroom (arithmetic below).
// The chart is rendered by tests/deploy/helm_render (Go text/template + Sprig, as Helm).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parse } from 'yaml';
import Ajv from 'ajv';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Service, PersistentVolumeClaim } from 'kubernetes-models/v1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const chart = join(root, 'deploy', 'helm', 'power');
const renderer = process.env.POWER_HELM_RENDER;
const binary = process.env.POWER_BINARY;

const kinds = { Deployment, Service, PersistentVolumeClaim, ServiceMonitor };

function objects(text) {
  return parseAllDocuments(text).map((d) => d.toJS()).filter((o) => o);
}

function validate(objs, where) {
  for (const o of objs) {
    const Kind = kinds[o.kind];
    assert.ok(Kind, `${where}: unexpected kind ${o.kind}`);
    try {
      new Kind(o).validate();
    } catch (e) {
      assert.fail(`${where}: ${o.kind} ${o.metadata?.name}: ${e.message}`);
    }
  }
}

function render(overrides) {
  const args = [chart, 'rel'];
  if (overrides) {
    const f = join(mkdtempSync(join(tmpdir(), 'power-helm-')), 'values.yaml');
    writeFileSync(f, JSON.stringify(overrides));  // JSON is YAML
    args.push(f);
  }
  return objects(execFileSync(renderer, args, { encoding: 'utf8' }));
}

const help = (cmd) => execFileSync(binary, [cmd, '--help'], { encoding: 'utf8' });

// Every --flag in `args` (before '=') is in `power CMD --help`.
function checkFlags(args, cmd, where) {
  const text = help(cmd);
  for (const a of args) {
    if (!a.startsWith('--')) continue;
    const flag = a.split('=')[0];
    assert.ok(new RegExp(`(^|[ ,])${flag}( |,|=|$)`, 'm').test(text), `${where}: power ${cmd} has no ${flag}`);
  }
}

function checkDeployment(d, where) {
  const spec = d.spec.template.spec;
  const c = spec.containers.find((x) => x.name === 'power');
  assert.equal(c.args[0], 'serve');
  checkFlags(c.args.slice(1), 'serve', where);
  for (const init of spec.initContainers ?? []) {
    assert.equal(init.args[0], 'pull');
    checkFlags(init.args.slice(1), 'pull', where);
  }
  assert.equal(c.readinessProbe.httpGet.path, '/health/ready');
  assert.equal(c.livenessProbe.httpGet.path, '/health/live');
  const drain = Number(c.args.find((a) => a.startsWith('--drain-timeout=')).split('=')[1]);
  const pause = Number(c.lifecycle.preStop.exec.command[1]);
  assert.ok(pause + drain < spec.terminationGracePeriodSeconds,
    `${where}: preStop ${pause} s + drain ${drain} s >= grace ${spec.terminationGracePeriodSeconds} s`);
  assert.ok(spec.securityContext.runAsNonRoot);
  assert.equal(spec.securityContext.runAsUser, 10001);  // the image's user (build-image.sh)
  return c;
}

const skip = !renderer || !binary ? 'POWER_HELM_RENDER and POWER_BINARY not set (run.sh sets them)' : false;

test('deploy/k8s/power.yaml validates and matches the binary', { skip }, () => {
  const objs = objects(readFileSync(join(root, 'deploy', 'k8s', 'power.yaml'), 'utf8'));
  assert.deepEqual(objs.map((o) => o.kind).sort(),
    ['Deployment', 'PersistentVolumeClaim', 'Service', 'ServiceMonitor']);
  validate(objs, 'power.yaml');
  checkDeployment(objs.find((o) => o.kind === 'Deployment'), 'power.yaml');
});

test('the chart renders valid objects for several value sets', { skip }, () => {
  const defaults = render();
  validate(defaults, 'chart defaults');
  assert.deepEqual(defaults.map((o) => o.kind).sort(),
    ['Deployment', 'PersistentVolumeClaim', 'Service', 'ServiceMonitor']);
  const c = checkDeployment(defaults.find((o) => o.kind === 'Deployment'), 'chart defaults');
  // Memory = (weights + KV + state + scratch) * (100 + headroom) / 100, integer division as
  // Sprig's div: (4402341888 + 1073741824 + 0 + 314572800) * 110 / 100.
  const plan = 4402341888 + 1073741824 + 0 + 314572800;
  assert.equal(c.resources.requests.memory, String(Math.floor((plan * 110) / 100)));
  assert.equal(c.resources.limits.memory, c.resources.requests.memory);
  assert.ok(!c.args.some((a) => a.startsWith('--api-key-file')));
  assert.equal(c.resources.limits['nvidia.com/gpu'], undefined);

  const keyed = render({ apiKeys: { existingSecret: 'power-keys' }, device: 'cuda',
    serviceMonitor: { enabled: true, interval: '15s' }, replicaCount: 5,
    serve: { extraArgs: ['--kv-type=f32'] } });
  validate(keyed, 'chart keyed');
  const d = keyed.find((o) => o.kind === 'Deployment');
  const k = checkDeployment(d, 'chart keyed');
  assert.equal(d.spec.replicas, 5);
  assert.ok(k.args.includes('--api-key-file=/etc/power/keys/keys'));
  assert.ok(k.args.includes('--kv-type=f32'));
  assert.equal(k.resources.limits['nvidia.com/gpu'], 1);
  assert.equal(d.spec.template.spec.volumes.find((v) => v.name === 'api-keys').secret.secretName, 'power-keys');
  const sm = keyed.find((o) => o.kind === 'ServiceMonitor');
  assert.equal(sm.spec.endpoints[0].bearerTokenSecret.name, 'power-keys');

  const noMonitor = render({ serviceMonitor: { enabled: false } });
  assert.ok(!noMonitor.some((o) => o.kind === 'ServiceMonitor'));
});

// `power serve --print-plan` gives the chart's memoryPlan; the rendered request is its total
// plus 10 % headroom.
const model = process.env.POWER_SHARED_DIR &&
  join(process.env.POWER_SHARED_DIR, 'models', 'stories260K', 'stories260K-F32.gguf');
let haveModel = false;
try { haveModel = !!model && readFileSync(model).length > 0; } catch { /* no ../shared */ }
const skipPlan = skip || (!haveModel && process.env.CI !== 'true' ? 'no stories260K (POWER_SHARED_DIR)' : false);

test('the chart sized from power serve --print-plan', { skip: skipPlan }, () => {
  const plan = JSON.parse(execFileSync(binary, ['serve', '-m', model, '--ctx', '512', '--max-running', '4',
    '--print-plan'], { encoding: 'utf8' }));
  const m = plan.models[0];
  assert.equal(m.name, 'stories260K-F32');
  assert.equal(plan.total_bytes, m.weights_bytes + m.kv_cache_bytes + m.state_bytes + m.scratch_bytes);
  const objs = render({ memoryPlan: { ...plan.helm_memory_plan, headroomPercent: 10 } });
  validate(objs, 'chart from plan');
  const c = objs.find((o) => o.kind === 'Deployment').spec.template.spec.containers[0];
  assert.equal(c.resources.requests.memory, String(Math.floor((plan.total_bytes * 110) / 100)));
});

test('values.yaml passes values.schema.json and bad values fail it', { skip }, () => {
  const schema = JSON.parse(readFileSync(join(chart, 'values.schema.json'), 'utf8'));
  const values = parse(readFileSync(join(chart, 'values.yaml'), 'utf8'));
  const check = new Ajv({ allErrors: true }).compile(schema);
  assert.ok(check(values), JSON.stringify(check.errors));
  const bad = [
    ['replicaCount', 0], ['device', 'tpu'], ['cpu', 'four'],
    ['model', { ...values.model, sha256: 'abc' }],
    ['serve', { ...values.serve, maxRunning: 0 }],
    ['store', { ...values.store, size: '20 GB' }],
    ['unknownKey', 1],
  ];
  for (const [key, v] of bad) {
    assert.equal(check({ ...values, [key]: v }), false, `${key}=${JSON.stringify(v)} passed`);
  }
});
