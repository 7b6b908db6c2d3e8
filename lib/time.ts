/** A timestamp as the API writes it (pg gives Dates; JSON gives strings); null stays null. */
export const iso = (d: Date | string | null) => (d === null ? null : d instanceof Date ? d.toISOString() : new Date(d).toISOString());
