#!/usr/bin/env node
// The day of an OpenPAI user, through OpenPAI's own JS SDK (@microsoft/openpai-js-sdk, the library
// under OpenPAI's VS Code client), against a REST server: cluster info, basic login, tokens,
// submit a protocol YAML job, list with filters, detail, attempts, logs, tags, stop, start again.
//
//   node flow.js --server URL --user NAME --password PASSWORD --job JOB.yaml [--keep-going]
//   (or PAI_SERVER, PAI_USER, PAI_PASSWORD, PAI_JOB_YAML, FLOW_KEEP_GOING=1)
//
// Every call goes through the SDK's clients, as a user's script or the VS Code client makes it.
// The one request the SDK has no method for is reading a log location's `uri`; the flow fetches
// it as OpenPAI's web portal does: a plain GET of the URI it was given, with no token header.
//
// Output: one JSON line per step: {step, ok, status, error?, code?, fields?, requests}, where
// `requests` lists the HTTP requests the SDK made in that step (method, path, status). Then a
// summary line {summary: {passed, failed, firstFailure}}. The exit code is 1 on the first failed
// step (the flow stops there unless --keep-going), 2 on bad arguments.
'use strict';

const fs = require('fs');
const path = require('path');
const { PAIV2 } = require('@microsoft/openpai-js-sdk');

// The SDK's own copies: the axios instance it sends with (to list its requests) and its js-yaml.
const sdkDir = path.dirname(require.resolve('@microsoft/openpai-js-sdk/package.json'));
const axios = require(require.resolve('axios', { paths: [sdkDir] }));
const yaml = require(require.resolve('js-yaml', { paths: [sdkDir] }));

const TAG = 'sdk-flow';
const POLL_MS = 200;
const WAIT_S = 30;
const ENDED = ['SUCCEEDED', 'FAILED', 'STOPPED'];

function options(argv) {
  const given = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--keep-going') given.keepGoing = true;
    else if (flag.startsWith('--') && i + 1 < argv.length) given[flag.slice(2)] = argv[++i];
    else throw new Error(`unknown argument ${flag}`);
  }
  const opts = {
    server: given.server || process.env.PAI_SERVER,
    user: given.user || process.env.PAI_USER,
    password: given.password || process.env.PAI_PASSWORD,
    job: given.job || process.env.PAI_JOB_YAML,
    keepGoing: Boolean(given.keepGoing || process.env.FLOW_KEEP_GOING === '1'),
  };
  const missing = ['server', 'user', 'password', 'job'].filter((k) => !opts[k]);
  if (missing.length) throw new Error(`missing --${missing.join(', --')}`);
  opts.server = opts.server.replace(/\/+$/, '');
  return opts;
}

// ---- what each step saw: the SDK's requests, recorded at its axios instance ----
let requests = [];

function note(config, status, failure) {
  const url = new URL(config.url);
  const entry = { method: (config.method || 'get').toUpperCase(), path: url.pathname + url.search };
  entry.status = status;
  if (failure) entry.failure = failure;
  const last = requests[requests.length - 1];
  if (last && last.method === entry.method && last.path === entry.path && last.status === status) {
    last.times = (last.times || 1) + 1; // polling: one entry, counted
  } else {
    requests.push(entry);
  }
}

axios.interceptors.response.use(
  (res) => {
    note(res.config, res.status);
    return res;
  },
  (err) => {
    // an answer is recorded by its status; only a request with none keeps the transport's error
    if (err.config) note(err.config, err.response ? err.response.status : null, err.response ? undefined : err.message);
    return Promise.reject(err);
  },
);

class CheckFailed extends Error {}

function expect(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

function describe(err) {
  if (err instanceof CheckFailed) return err.message;
  if (err.response && err.status === undefined) {
    // axios itself (the log read): the answer's status and body
    return `HTTP ${err.response.status}; body ${String(err.response.data).slice(0, 400)}`;
  }
  if (err.status !== undefined) {
    // the SDK's PAIBaseError: message is the body's `message`, data the whole body
    const body = typeof err.data === 'string' ? err.data : JSON.stringify(err.data);
    return `${err.constructor.name} ${err.status}: ${err.message || '(no message)'}; body ${String(body).slice(0, 400)}`;
  }
  // A request with no answer: the SDK's error mapping fails on it (TypeError), so the transport
  // error recorded above is the one that says what happened.
  const lost = requests.filter((r) => r.failure).map((r) => r.failure);
  return `${err.name}: ${err.message}${lost.length ? `; transport: ${lost.join('; ')}` : ''}`;
}

function lastStatus() {
  return requests.length ? requests[requests.length - 1].status : null;
}

// ---- the runner: one JSON line per step ----
const results = { passed: 0, failed: [] };

class FlowStopped extends Error {}

async function step(name, keepGoing, body) {
  requests = [];
  try {
    const fields = await body();
    results.passed += 1;
    emit({ step: name, ok: true, status: lastStatus(), fields, requests });
    return fields;
  } catch (err) {
    results.failed.push(name);
    const status = err.status !== undefined ? err.status : err.response ? err.response.status : lastStatus();
    const line = { step: name, ok: false, status };
    line.error = describe(err);
    if (err.data && err.data.code) line.code = err.data.code;
    emit({ ...line, requests });
    if (!keepGoing) throw new FlowStopped(name);
    return undefined;
  }
}

function emit(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(what, read, done, seconds = WAIT_S) {
  const deadline = Date.now() + seconds * 1000;
  let seen;
  for (;;) {
    seen = await read();
    if (done(seen)) return seen;
    if (Date.now() > deadline) throw new CheckFailed(`${what}: not within ${seconds}s; last seen ${JSON.stringify(summary(seen))}`);
    await sleep(POLL_MS);
  }
}

function summary(job) {
  const status = (job && job.jobStatus) || {};
  return { state: status.state, executionType: status.executionType, attemptId: status.attemptId };
}

function names(list) {
  const rows = Array.isArray(list) ? list : (list && list.data) || [];
  return rows.map((job) => job.name);
}

function firstTask(detail) {
  const role = detail.taskRoles && detail.taskRoles.taskrole;
  return role && role.taskStatuses && role.taskStatuses[0];
}


// ---- the flow ----
async function run(opts) {
  const go = (name, body) => step(name, opts.keepGoing, body);
  // The SDK's cluster config (IPAICluster), as the VS Code client stores one.
  const cluster = (extra) => ({ rest_server_uri: opts.server, https: opts.server.startsWith('https:'), ...extra });
  const config = yaml.safeLoad(fs.readFileSync(opts.job, 'utf8'));
  const user = opts.user;
  const name = config.name;
  const job = {}; // what later steps need from earlier ones

  await go('info', async () => {
    // A client with a password and no token logs in by itself before its first request.
    const client = new PAIV2.OpenPAIClient(cluster({ username: user, password: opts.password }));
    const info = await client.api.getClusterInfo();
    expect(info && typeof info.name === 'string', `info has no name: ${JSON.stringify(info)}`);
    expect(['k8s', 'yarn'].includes(info.launcherType), `launcherType ${info.launcherType}`);
    expect(info.authnMethod === 'basic', `authnMethod ${info.authnMethod}, the flow logs in with basic`);
    return { name: info.name, version: info.version, launcherType: info.launcherType, authnMethod: info.authnMethod };
  });

  await go('login', async () => {
    const client = new PAIV2.OpenPAIClient(cluster({ username: user }));
    const login = await client.authn.basicLogin(user, opts.password);
    expect(typeof login.token === 'string' && login.token.length > 0, 'no token in the login answer');
    expect(login.user === user, `login answered user ${login.user}`);
    expect(login.admin === false, `login answered admin ${login.admin} for a plain user`);
    job.userClient = new PAIV2.OpenPAIClient(cluster({ username: user, token: login.token }));
    return { user: login.user, admin: login.admin, tokenLength: login.token.length };
  });
  const asUser = () => job.userClient || new PAIV2.OpenPAIClient(cluster({ username: user, password: opts.password }));

  await go('virtual-clusters', async () => {
    const vcs = await asUser().virtualCluster.listVirtualClusters();
    const vc = config.defaults && config.defaults.virtualCluster;
    expect(vcs && vc in vcs, `the job's VC ${vc} is not listed: ${Object.keys(vcs || {})}`);
    return { names: Object.keys(vcs), [vc]: vcs[vc].resourcesTotal };
  });

  await go('token-create', async () => {
    const made = await asUser().token.createApplicationToken();
    expect(made && typeof made.token === 'string' && made.token.length > 0, `no token: ${JSON.stringify(made)}`);
    // From here on the client is configured as the VS Code client is: username and a token.
    job.client = new PAIV2.OpenPAIClient(cluster({ username: user, token: made.token }));
    return { application: made.application, tokenLength: made.token.length };
  });
  const client = () => job.client || asUser();

  await go('token-list', async () => {
    const list = await asUser().token.getTokens();
    expect(list && Array.isArray(list.tokens), `no tokens array: ${JSON.stringify(list)}`);
    expect(list.tokens.every((t) => typeof t === 'string'), 'tokens are not all strings');
    expect(list.tokens.length >= 2, `${list.tokens.length} tokens listed; the login and the application token make 2`);
    return { count: list.tokens.length };
  });

  await go('submit', async () => {
    const answer = await client().job.createJob(config);
    return { answer };
  });

  await go('wait-running', async () => {
    const seen = await waitFor(`${user}~${name} RUNNING`, () => client().job.getJob(user, name), (d) => {
      expect(!ENDED.includes(d.jobStatus.state), `the job ended (${d.jobStatus.state}) before it was seen running`);
      return d.jobStatus.state === 'RUNNING';
    });
    return summary(seen);
  });

  const listed = async (query) => names(await client().job.listJobs(query));
  await go('list-username', async () => {
    const mine = await listed({ username: user });
    expect(mine.includes(name), `username=${user} lists ${JSON.stringify(mine)}`);
    return { names: mine };
  });
  await go('list-state', async () => {
    const running = await listed({ username: user, state: 'RUNNING,WAITING' });
    const succeeded = await listed({ username: user, state: 'SUCCEEDED' });
    expect(running.includes(name), `state=RUNNING,WAITING lists ${JSON.stringify(running)}`);
    expect(!succeeded.includes(name), `state=SUCCEEDED lists the running job: ${JSON.stringify(succeeded)}`);
    return { running, succeeded };
  });
  await go('list-vc', async () => {
    const vc = config.defaults.virtualCluster;
    const inVc = await listed({ vc });
    const elsewhere = await listed({ vc: 'no-such-vc' });
    expect(inVc.includes(name), `vc=${vc} lists ${JSON.stringify(inVc)}`);
    expect(!elsewhere.includes(name), `vc=no-such-vc lists ${JSON.stringify(elsewhere)}`);
    return { [vc]: inVc, 'no-such-vc': elsewhere };
  });
  await go('list-keyword', async () => {
    const hit = await listed({ keyword: name.slice(0, 8) });
    const miss = await listed({ keyword: 'no-such-keyword' });
    expect(hit.includes(name), `keyword=${name.slice(0, 8)} lists ${JSON.stringify(hit)}`);
    expect(!miss.includes(name), `keyword=no-such-keyword lists ${JSON.stringify(miss)}`);
    return { hit, miss };
  });
  await go('list-paged', async () => {
    const page = await client().job.listJobs({
      username: user, offset: 0, limit: 1, order: 'submissionTime,DESC', withTotalCount: true,
    });
    expect(page && typeof page.totalCount === 'number' && Array.isArray(page.data), `withTotalCount answered ${JSON.stringify(page).slice(0, 200)}`);
    expect(page.totalCount >= 1 && page.data.length === 1, `totalCount ${page.totalCount}, ${page.data.length} rows for limit=1`);
    return { totalCount: page.totalCount, names: names(page) };
  });

  await go('detail', async () => {
    const detail = await client().job.getJob(user, name);
    const status = detail.jobStatus;
    const task = firstTask(detail);
    expect(detail.name === name, `name ${detail.name}`);
    expect(status.state === 'RUNNING' && status.executionType === 'START', `state ${status.state}, executionType ${status.executionType}`);
    expect(Number.isInteger(status.attemptId), `attemptId ${status.attemptId}`);
    expect(task && task.taskState === 'RUNNING', `taskrole/0 ${JSON.stringify(task)}`);
    job.attemptId = status.attemptId;
    job.taskAttemptId = Number.isInteger(task.attemptId) ? task.attemptId : 0;
    return {
      state: status.state, subState: status.subState, attemptId: status.attemptId,
      appLaunchedTime: status.appLaunchedTime, tags: detail.tags,
      task: { taskState: task.taskState, attemptId: task.attemptId, containerNodeName: task.containerNodeName, containerGpus: task.containerGpus },
    };
  });

  await go('config', async () => {
    const submitted = await client().job.getJobConfig(user, name);
    expect(submitted && submitted.name === name, `config name ${submitted && submitted.name}`);
    expect(submitted.taskRoles && submitted.taskRoles.taskrole, 'config has no taskrole');
    return { name: submitted.name, protocolVersion: submitted.protocolVersion };
  });

  await go('job-attempt', async () => {
    const attempt = await client().job.getJob(user, name, job.attemptId || 0);
    expect(attempt.jobStatus && attempt.jobStatus.attemptId === (job.attemptId || 0), `attempt ${JSON.stringify(summary(attempt))}`);
    return summary(attempt);
  });

  await go('job-attempts', async () => {
    await client().jobHistory.getJobAttemptsHealthz(user, name);
    const attempts = await client().jobHistory.getJobAttempts(user, name);
    expect(Array.isArray(attempts) && attempts.length >= 1, `attempts ${JSON.stringify(attempts).slice(0, 200)}`);
    const latest = attempts.find((a) => a.isLatest);
    expect(latest && latest.attemptIndex === (job.attemptId || 0), `latest attempt ${JSON.stringify(latest)}`);
    return { count: attempts.length, latest: { attemptIndex: latest.attemptIndex, state: latest.state } };
  });

  await go('task-attempts', async () => {
    const task = await client().job.getTask(user, name, job.attemptId || 0, 'taskrole', 0);
    expect(task && task.taskRoleName === 'taskrole' && task.taskIndex === 0, `task ${JSON.stringify(task).slice(0, 200)}`);
    expect(Array.isArray(task.attempts) && task.attempts.length >= 1, 'no task attempts');
    const current = task.attempts[task.attempts.length - 1];
    return { taskState: task.taskState, attempts: task.attempts.length, current: { attemptId: current.attemptId, attemptState: current.attemptState } };
  });

  await go('events', async () => {
    const events = await client().job.listEvents(user, name);
    expect(events && typeof events.totalCount === 'number' && Array.isArray(events.data), `events ${JSON.stringify(events).slice(0, 200)}`);
    return { totalCount: events.totalCount, reasons: events.data.map((e) => e.reason).slice(0, 5) };
  });

  await go('logs', async () => {
    const logs = await client().job.getTaskLogs(user, name, job.attemptId || 0, 'taskrole', 0, job.taskAttemptId || 0);
    const stdout = logs && Array.isArray(logs.locations) && logs.locations.find((l) => l.name === 'stdout');
    expect(stdout && typeof stdout.uri === 'string', `no stdout location: ${JSON.stringify(logs)}`);
    const relative = !/^https?:\/\//.test(stdout.uri);
    const where = new URL(stdout.uri, `${opts.server}/`).toString();
    // As OpenPAI's web portal reads it: a plain GET of the location, no token header.
    const read = () => axios.get(where, { responseType: 'text', transformResponse: [(d) => d] }).then((r) => r.data);
    const text = await waitFor('stdout has text', read, (t) => typeof t === 'string' && t.length > 0, 10);
    return { names: logs.locations.map((l) => l.name), uriRelative: relative, stdoutHead: text.slice(0, 120) };
  });

  await go('tag-add', async () => {
    await client().job.addTag(user, name, TAG);
    const detail = await client().job.getJob(user, name);
    const tagged = await listed({ username: user, tagsContain: TAG });
    const untagged = await listed({ username: user, tagsNotContain: TAG });
    expect((detail.tags || []).includes(TAG), `tags after adding: ${JSON.stringify(detail.tags)}`);
    expect(tagged.includes(name), `tagsContain=${TAG} lists ${JSON.stringify(tagged)}`);
    expect(!untagged.includes(name), `tagsNotContain=${TAG} lists ${JSON.stringify(untagged)}`);
    return { tags: detail.tags, tagsContain: tagged, tagsNotContain: untagged };
  });
  await go('tag-remove', async () => {
    await client().job.deleteTag(user, name, TAG);
    const detail = await client().job.getJob(user, name);
    const tagged = await listed({ username: user, tagsContain: TAG });
    expect(!(detail.tags || []).includes(TAG), `tags after removing: ${JSON.stringify(detail.tags)}`);
    expect(!tagged.includes(name), `tagsContain=${TAG} still lists it: ${JSON.stringify(tagged)}`);
    return { tags: detail.tags };
  });

  await go('stop', async () => {
    await client().job.updateJobExecutionType(user, name, 'STOP');
    const seen = await waitFor(`${user}~${name} ended`, () => client().job.getJob(user, name), (d) => ENDED.includes(d.jobStatus.state));
    expect(seen.jobStatus.state === 'STOPPED', `state ${seen.jobStatus.state} after STOP`);
    expect(seen.jobStatus.executionType === 'STOP', `executionType ${seen.jobStatus.executionType} after STOP`);
    return { ...summary(seen), completedTime: seen.jobStatus.completedTime };
  });

  await go('resubmit', async () => {
    const before = job.attemptId || 0;
    await client().job.updateJobExecutionType(user, name, 'START');
    const seen = await waitFor(`${user}~${name} RUNNING again`, () => client().job.getJob(user, name),
      (d) => d.jobStatus.state === 'RUNNING' && d.jobStatus.attemptId > before);
    expect(seen.jobStatus.executionType === 'START', `executionType ${seen.jobStatus.executionType} after START`);
    const attempts = await client().jobHistory.getJobAttempts(user, name);
    expect(Array.isArray(attempts) && attempts.length >= 2, `${(attempts || []).length} job attempts after START`);
    return { ...summary(seen), attempts: attempts.map((a) => ({ attemptIndex: a.attemptIndex, state: a.state, isLatest: a.isLatest })) };
  });
}

if (require.main === module) {
  let opts;
  try {
    opts = options(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`flow.js: ${err.message}\n`);
    process.exit(2);
  }
  run(opts)
    .catch((err) => {
      if (!(err instanceof FlowStopped)) {
        emit({ step: 'flow', ok: false, error: `${err.name}: ${err.message}`, requests });
        results.failed.push('flow');
      }
    })
    .finally(() => {
      emit({ summary: { passed: results.passed, failed: results.failed, firstFailure: results.failed[0] || null } });
      process.exitCode = results.failed.length ? 1 : 0;
    });
}
