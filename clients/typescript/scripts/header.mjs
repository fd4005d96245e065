// Marks a generated file as generated, with the command that makes it.
import { readFileSync, writeFileSync } from "node:fs";
const file = process.argv[2];
const text = readFileSync(file, "utf8").replace(/^\/\/ Generated.*\n/, "");
writeFileSync(file, `// Generated from ../openapi.json by \`npm run generate\`; do not edit.\n${text}`);
