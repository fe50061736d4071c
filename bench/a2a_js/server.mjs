// The @a2a-js/sdk reference for Butler's bench: express, the SDK's DefaultRequestHandler
// with its default InMemoryTaskStore, and an echo executor (task, working, completed with
// the user's text as the agent message), as bench/harness/reference_server.py does for
// the Python a2a-sdk. A2A 1.0 JSON-RPC at "/", HTTP+JSON under "/rest".
//
//   node bench/a2a_js/server.mjs --token-hash HEX
//
// Prints "reference serving on http://127.0.0.1:PORT" once it listens. Every route but
// /healthz and the agent card needs "Authorization: Bearer <token>", checked as Butler
// does it: SHA-256 of the token compared in constant time.

import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import express from 'express';
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import {
  UserBuilder, agentCardHandler, jsonRpcHandler, restHandler,
} from '@a2a-js/sdk/server/express';

const args = process.argv.slice(2);
const at = args.indexOf('--token-hash');
if (at < 0 || !args[at + 1]) {
  console.error('usage: node server.mjs --token-hash HEX');
  process.exit(2);
}
const digest = Buffer.from(args[at + 1], 'hex');

function textOf(message) {
  return (message?.parts ?? [])
    .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
    .join('');
}

function status(state, message) {
  return { state, message, timestamp: new Date().toISOString() };
}

const echo = {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const user = ctx.userMessage;
    if (!ctx.task) {
      bus.publish(AgentEvent.task({
        id: taskId, contextId, status: status(TaskState.TASK_STATE_SUBMITTED, undefined),
        artifacts: [], history: [user], metadata: undefined,
      }));
    }
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(TaskState.TASK_STATE_WORKING, undefined),
      metadata: undefined,
    }));
    const reply = {
      messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT,
      parts: [{ content: { $case: 'text', value: textOf(user) }, metadata: undefined,
                filename: '', mediaType: '' }],
      metadata: undefined, extensions: [], referenceTaskIds: [],
    };
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(TaskState.TASK_STATE_COMPLETED, reply),
      metadata: undefined,
    }));
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId: '', status: status(TaskState.TASK_STATE_CANCELED, undefined),
      metadata: undefined,
    }));
    bus.finished();
  },
};

function bearer(req, res, next) {
  if (req.path === '/healthz' || req.path === `/${AGENT_CARD_PATH}`) return next();
  const [scheme, token = ''] = (req.get('authorization') ?? '').split(' ', 2);
  const got = createHash('sha256').update(token.trim()).digest();
  if (scheme.toLowerCase() !== 'bearer' || !timingSafeEqual(got, digest)) {
    res.status(401).set('WWW-Authenticate', 'Bearer').json({ error: 'unauthenticated' });
    return undefined;
  }
  return next();
}

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const url = `http://127.0.0.1:${server.address().port}`;
  const card = {
    name: 'reference-echo-js', description: '@a2a-js/sdk echo agent (bench reference)',
    version: '1.0.0',
    supportedInterfaces: [
      { url: `${url}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' },
      { url: `${url}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0', tenant: '' },
    ],
    capabilities: { streaming: false, pushNotifications: false, extensions: [] },
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'echo', description: 'echoes the message',
               tags: ['bench.echo'], examples: [], inputModes: [], outputModes: [],
               securityRequirements: [] }],
    securitySchemes: {}, securityRequirements: [], signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), echo);
  const options = { requestHandler: handler, userBuilder: UserBuilder.noAuthentication };
  app.get('/healthz', (_req, res) => res.json({ status: 'ok' }));
  app.use(bearer);
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use('/rest', restHandler(options));
  app.use('/', jsonRpcHandler(options));
  console.log(`reference serving on ${url}`);
});
server.keepAliveTimeout = 60_000;
