// A standard A2A agent built with the official @a2a-js/sdk server (express, the SDK's
// DefaultRequestHandler and InMemoryTaskStore): what a Butler delegates to in
// tests/test_delegation_js.py, started by tests/js_support.py as a subprocess.
//
//   node tests/js_agent/agent.mjs --token-hash HEX --mode task|ask|wait
//
// It listens on 127.0.0.1 port 0 and prints {"port": N} once it serves. A2A 1.0 JSON-RPC
// at "/", HTTP+JSON under "/rest", the card at /.well-known/agent-card.json, streaming on.
// It answers in upper case. Every task streams its status: "working" with the message
// "shouting", the answer as an artifact "shout", then "completed". MODE ``task``: that;
// ``ask``: first asks "how loud?" (input-required), then shouts the answer; ``wait``:
// works until canceled, and honours the cancel. GET /test/seen lists the messages it was
// sent, the tasks a "wait" agent began and the task id of each cancel it received.
//
// Every route but the card needs "Authorization: Bearer <token>": the SHA-256 of the
// token compared in constant time with HEX, so the token is never on a command line.

import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import express from 'express';
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import {
  UserBuilder, agentCardHandler, jsonRpcHandler, restHandler,
} from '@a2a-js/sdk/server/express';

function option(name) {
  const args = process.argv.slice(2);
  const at = args.indexOf(name);
  return at < 0 ? undefined : args[at + 1];
}

const tokenHash = option('--token-hash');
const mode = option('--mode') ?? 'task';
if (!tokenHash || !['task', 'ask', 'wait'].includes(mode)) {
  console.error('usage: node agent.mjs --token-hash HEX --mode task|ask|wait');
  process.exit(2);
}
const digest = Buffer.from(tokenHash, 'hex');
const seen = { messages: [], working: [], cancels: [] };
const stopping = new Map(); // task id -> resolves the "wait" work when it is canceled

function textOf(message) {
  return (message?.parts ?? [])
    .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
    .join('');
}

function textPart(text) {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '',
           mediaType: 'text/plain' };
}

function agentMessage(taskId, contextId, text) {
  return { messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT,
           parts: [textPart(text)], metadata: undefined, extensions: [], referenceTaskIds: [] };
}

function status(state, message) {
  return { state, message, timestamp: new Date().toISOString() };
}

const shout = {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const user = ctx.userMessage;
    seen.messages.push({ taskId: user.taskId, contextId: user.contextId, text: textOf(user) });
    const first = !ctx.task;
    // Each turn begins with the task: the SDK refuses a turn that does not.
    bus.publish(AgentEvent.task(ctx.task ?? {
      id: taskId, contextId, status: status(TaskState.TASK_STATE_SUBMITTED, undefined),
      artifacts: [], history: [user], metadata: undefined,
    }));
    const update = (state, message) => bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(state, message), metadata: undefined,
    }));
    if (mode === 'ask' && first) {
      update(TaskState.TASK_STATE_INPUT_REQUIRED, agentMessage(taskId, contextId, 'how loud?'));
      bus.finished();
      return;
    }
    update(TaskState.TASK_STATE_WORKING, agentMessage(taskId, contextId, 'shouting'));
    if (mode === 'wait') {
      seen.working.push(taskId);
      await new Promise((resolve) => stopping.set(taskId, resolve)); // until the cancel
      return; // the cancel published the end
    }
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: { artifactId: randomUUID(), name: 'shout', description: '',
                  parts: [textPart(textOf(user).toUpperCase())], metadata: undefined,
                  extensions: [] },
    }));
    update(TaskState.TASK_STATE_COMPLETED, undefined);
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    seen.cancels.push(taskId);
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId: '', status: status(TaskState.TASK_STATE_CANCELED, undefined),
      metadata: undefined,
    }));
    bus.finished();
    stopping.get(taskId)?.();
    stopping.delete(taskId);
  },
};

function bearer(req, res, next) {
  if (req.path === `/${AGENT_CARD_PATH}`) return next();
  const [scheme = '', token = ''] = (req.get('authorization') ?? '').split(' ', 2);
  const got = createHash('sha256').update(token.trim()).digest();
  if (scheme.toLowerCase() !== 'bearer' || got.length !== digest.length
      || !timingSafeEqual(got, digest)) {
    res.status(401).set('WWW-Authenticate', 'Bearer').json({ error: 'unauthenticated' });
    return undefined;
  }
  return next();
}

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const url = `http://127.0.0.1:${port}`;
  const card = {
    name: 'shouter-js', description: '@a2a-js/sdk agent that shouts', version: '1.0.0',
    supportedInterfaces: [
      { url: `${url}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' },
      { url: `${url}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0', tenant: '' },
    ],
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'shout', name: 'shout', description: 'upper-cases', tags: ['shout'],
               examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    securitySchemes: {}, securityRequirements: [], signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), shout);
  const options = { requestHandler: handler, userBuilder: UserBuilder.noAuthentication };
  app.use(bearer);
  app.get('/test/seen', (_req, res) => res.json(seen));
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use('/rest', restHandler(options));
  app.use('/', jsonRpcHandler(options));
  console.log(JSON.stringify({ port }));
});
server.keepAliveTimeout = 60_000;
