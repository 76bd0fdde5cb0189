// Conformance upstream: an MCP server (official TypeScript SDK, Streamable HTTP with sessions) implementing the
// tools the MCP conformance suite's server scenarios call, so the suite can run against it directly and through the
// tool gateway. Usage: PORT=3920 node conformance-upstream.mjs   (serves http://127.0.0.1:$PORT/mcp)
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

// 1x1 red PNG and a tiny WAV header: minimal valid media for the content tests.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function buildServer() {
  const server = new McpServer(
    { name: "conformance-upstream", version: "1.0.0" },
    { capabilities: { tools: {}, logging: {} } },
  );
  server.registerTool("test_simple_text", { description: "Returns simple text" }, async () => ({
    content: [{ type: "text", text: "This is a simple text response for testing." }],
  }));
  server.registerTool("test_image_content", { description: "Returns an image" }, async () => ({
    content: [{ type: "image", data: PNG, mimeType: "image/png" }],
  }));
  server.registerTool("test_audio_content", { description: "Returns audio" }, async () => ({
    content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }],
  }));
  server.registerTool("test_embedded_resource", { description: "Returns an embedded resource" }, async () => ({
    content: [
      {
        type: "resource",
        resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." },
      },
    ],
  }));
  server.registerTool("test_multiple_content_types", { description: "Returns text, image and resource" }, async () => ({
    content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      {
        type: "resource",
        resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: '{"test":"data","value":123}' },
      },
    ],
  }));
  server.registerTool("test_tool_with_logging", { description: "Logs three messages" }, async (extra) => {
    // Tools without an input schema get only `extra`; notifications go on the request's own stream.
    const log = (data) => extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
    await log("Tool execution started");
    await sleep(50);
    await log("Tool processing data");
    await sleep(50);
    await log("Tool execution completed");
    return { content: [{ type: "text", text: "Tool with logging executed successfully" }] };
  });
  server.registerTool("test_error_handling", { description: "Always fails" }, async () => ({
    isError: true,
    content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
  }));
  server.registerTool("test_tool_with_progress", { description: "Reports progress" }, async (extra) => {
    const token = extra._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (token !== undefined) {
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress, total: 100 } });
      }
      if (progress < 100) await sleep(50);
    }
    return { content: [{ type: "text", text: "Tool with progress executed successfully" }] };
  });
  server.registerTool(
    "test_sampling",
    { description: "Asks the client to sample", inputSchema: { prompt: z.string() } },
    async ({ prompt }) => {
      const result = await server.server.createMessage({
        messages: [{ role: "user", content: { type: "text", text: prompt } }],
        maxTokens: 100,
      });
      return { content: [{ type: "text", text: `LLM response: ${result.content.text}` }] };
    },
  );
  server.registerTool(
    "test_elicitation",
    { description: "Asks the user", inputSchema: { message: z.string() } },
    async ({ message }) => {
      const result = await server.server.elicitInput({
        message,
        requestedSchema: {
          type: "object",
          properties: {
            username: { type: "string", description: "User's response" },
            email: { type: "string", description: "User's email address" },
          },
          required: ["username", "email"],
        },
      });
      return { content: [{ type: "text", text: `User response: ${JSON.stringify(result)}` }] };
    },
  );
  return server;
}

const transports = new Map();

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

const http = createServer(async (req, res) => {
  if (!req.url?.startsWith("/mcp")) {
    res.writeHead(404).end();
    return;
  }
  try {
    const sessionId = req.headers["mcp-session-id"];
    const body = req.method === "POST" ? await readJson(req) : undefined;
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (req.method !== "POST" || body?.method !== "initialize") {
        res.writeHead(sessionId ? 404 : 400, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "no valid session" }, id: null }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await buildServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (error) {
    console.error("conformance upstream error:", error);
    if (!res.headersSent) res.writeHead(500).end();
  }
});

const port = Number(process.env.PORT || 3920);
http.listen(port, "127.0.0.1", () => console.error(`conformance upstream listening on http://127.0.0.1:${port}/mcp`));
