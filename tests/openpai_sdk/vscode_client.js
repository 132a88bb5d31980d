#!/usr/bin/env node
// The OpenPAI VS Code client's calls (microsoft/openpaivscode), made as it makes them, against a
// REST server: the same libraries (request-promise-native, and OpenPAI's JS SDK for the job list),
// the same URLs (PAIRestUri in src/pai/utility/paiUri.ts), options and bodies.
//
//   node vscode_client.js --rest REST_SERVER_URI --user NAME --password PASSWORD \
//        --job EXISTING_JOB_NAME --yaml JOB.yaml
//
// REST_SERVER_URI is the cluster configuration's `rest_server_uri` (with its scheme, as the
// client's own requests add only http:// to one without). Output: one JSON line per call:
// {call, ok, status, body}; the exit code is 1 when the script itself failed.
'use strict';

const fs = require('fs');
const path = require('path');
const request = require('request-promise-native');
const { PAIV1, PAIV2 } = require('@microsoft/openpai-js-sdk');

const sdkDir = path.dirname(require.resolve('@microsoft/openpai-js-sdk/package.json'));
const yaml = require(require.resolve('js-yaml', { paths: [sdkDir] }));

const TIMEOUT = 60 * 1000; // PAIJobManager.TIMEOUT

function options(argv) {
  const given = {};
  for (let i = 0; i + 1 < argv.length; i += 2) given[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const key of ['rest', 'user', 'password', 'job', 'yaml']) {
    if (!given[key]) throw new Error(`missing --${key}`);
  }
  return given;
}

// PAIRestUri.getRestUrlWithApiPrefix: rest_server_uri + '/' + 'api/v1'
const v1 = (cluster) => `${cluster.rest_server_uri.replace(/\/?$/, '/')}api/v1`;
const v2 = (cluster) => `${cluster.rest_server_uri.replace(/\/?$/, '/')}api/v2`;

function show(call, status, body) {
  console.log(JSON.stringify({ call, ok: status >= 200 && status < 300, status, body }));
}

async function attempt(call, run) {
  try {
    const answer = await run();
    show(call, answer.statusCode, answer.body);
  } catch (e) {
    if (e.response) show(call, e.response.statusCode, e.response.body);
    else show(call, null, String(e.message || e));
  }
}

async function main() {
  const opts = options(process.argv.slice(2));
  const cluster = {
    rest_server_uri: opts.rest,
    username: opts.user,
    password: opts.password,
    https: opts.rest.startsWith('https:'),
  };
  const full = { resolveWithFullResponse: true };

  // PAIJobManager.getToken: no token in the configuration, so it logs in at /api/v1/token
  let token;
  await attempt('token', async () => {
    const answer = await request.post(`${v1(cluster)}/token`, {
      form: { username: cluster.username, password: cluster.password, expiration: 4000 },
      timeout: TIMEOUT,
      json: true,
      ...full,
    });
    token = answer.body.token;
    return answer;
  });
  const auth = { Authorization: `Bearer ${token}` };

  // submitJobV2 without generateJobName: is the name taken? (an existing job, then a free name)
  for (const [call, name] of [['job-detail', opts.job], ['job-detail-free', `${opts.job}-free`]]) {
    await attempt(call, () =>
      request.get(`${v1(cluster)}/user/${cluster.username}/jobs/${name}`, {
        headers: auth,
        timeout: TIMEOUT,
        json: true,
        ...full,
      }),
    );
  }

  // submitJobV2: the protocol YAML to /api/v2/jobs
  const config = yaml.safeLoad(fs.readFileSync(opts.yaml, 'utf8'));
  config.name = `${opts.job}-free`;
  await attempt('submit', () =>
    request.post(`${v2(cluster)}/jobs`, {
      headers: { ...auth, 'Content-Type': 'text/yaml' },
      body: yaml.safeDump(config),
      timeout: TIMEOUT,
      ...full,
    }),
  );

  // JobListTreeDataProvider.reloadJobs: the SDK's v2 list, else its v1 list
  const clusterConfig = {
    rest_server_uri: cluster.rest_server_uri,
    token: undefined,
    username: cluster.username,
    password: cluster.password,
    https: cluster.https,
  };
  try {
    const jobs = await new PAIV2.OpenPAIClient(clusterConfig).job.listJobs();
    show('list-v2', 200, jobs);
  } catch (e) {
    show('list-v2', e.response ? e.response.status : null, e.response ? e.response.data : String(e));
  }
  try {
    const jobs = await new PAIV1.OpenPAIClient(clusterConfig).job.list();
    show('list-v1', 200, jobs);
  } catch (e) {
    const body = e.response ? e.response.body : String(e);
    show('list-v1', e.statusCode || null, typeof body === 'string' ? safeJson(body) : body);
  }
  // the same v1 list with the token the client holds
  await attempt('list-v1-token', () =>
    request.get(`${v1(cluster)}/jobs`, { headers: auth, timeout: TIMEOUT, json: true, ...full }),
  );
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
