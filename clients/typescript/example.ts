/**
 * The README's example: a contact, a list, the contact added to it, and the list's members read
 * back. Type-checked with the project (`tsc`) and run against a live gateway by its test.
 */
import { createPartnerClient, type Problem, type Schemas } from "./index.js";

export async function addContactToNewList(baseUrl: string, apiKey: string): Promise<Schemas["ContactPage"]> {
  const api = createPartnerClient({ baseUrl, apiKey });

  const contact = await api.POST("/contacts", { body: { firstName: "Ana", phoneNumber: "+351912345678", email: "ana@example.com" } });
  if (!contact.data) throw new Error(`contact: ${(contact.error as Problem).detail}`);

  const list = await api.POST("/contacts/list", { body: { name: "VIP" } });
  if (!list.data) throw new Error(`list: ${(list.error as Problem).detail}`);

  const added = await api.POST("/contacts/list/contacts", { body: { listIds: [list.data.id], contactIds: [contact.data.id] } });
  if (!added.data) throw new Error(`members: ${(added.error as Problem).detail}`);

  const members = await api.GET("/contacts/list/{listId}/contacts", { params: { path: { listId: list.data.id }, query: { limit: 10 } } });
  if (!members.data) throw new Error(`read back: ${(members.error as Problem).detail}`);
  return members.data; // { data: [contact], page: 0, limit: 10, total: 1, totalPages: 1 }
}
