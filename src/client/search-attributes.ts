import type { Client } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';

/**
 * Custom search attributes that make the Web UI's workflow list a list of runs
 * (`TroupeRunStatus="RUNNING"`). The dev-server script registers them; on another service they
 * may be missing, and a run must start without them rather than fail.
 */
export const TroupeSearchAttributes = {
  runName: defineSearchAttributeKey('TroupeRunName', SearchAttributeType.KEYWORD),
  runStatus: defineSearchAttributeKey('TroupeRunStatus', SearchAttributeType.KEYWORD),
  groups: defineSearchAttributeKey('TroupeGroups', SearchAttributeType.KEYWORD_LIST),
  fleet: defineSearchAttributeKey('TroupeFleet', SearchAttributeType.KEYWORD),
} as const;

/** IndexedValueType numbers of the Temporal API, for the types used above. */
const indexedValueType: Record<SearchAttributeType, number> = {
  TEXT: 1,
  KEYWORD: 2,
  INT: 3,
  DOUBLE: 4,
  BOOL: 5,
  DATETIME: 6,
  KEYWORD_LIST: 7,
};

/** True when every Troupe search attribute is registered in the namespace with the right type. */
export async function troupeSearchAttributesRegistered(client: Client, namespace: string): Promise<boolean> {
  try {
    const { customAttributes } = await client.connection.operatorService.listSearchAttributes({ namespace });
    return Object.values(TroupeSearchAttributes).every(
      (key) => customAttributes[key.name] === indexedValueType[key.type],
    );
  } catch {
    // Services that deny the operator API (some hosted ones) just get runs without attributes.
    return false;
  }
}

export interface RunSearchAttributeValues {
  runName: string;
  groups: string[];
  fleet: string;
}

/** The attributes a run starts with; the workflow keeps TroupeRunStatus current afterwards. */
export function initialRunSearchAttributes(values: RunSearchAttributeValues): SearchAttributePair[] {
  return [
    { key: TroupeSearchAttributes.runName, value: values.runName },
    { key: TroupeSearchAttributes.runStatus, value: 'SUBMITTED' },
    { key: TroupeSearchAttributes.groups, value: values.groups },
    { key: TroupeSearchAttributes.fleet, value: values.fleet },
  ];
}
